"""Shared pieces of the estimators' simulations: the levels, the Monte-Carlo tolerance and two mechanisms that sit
exactly at their ε.

Every simulation is vectorised over many experiments and runs in a few seconds. Monte-Carlo tolerances: a flag
whose true false-positive rate is α = 0.05 shows, over R experiments, a rate within α + 3·sqrt(α(1 − α)/R)
(three standard errors) with probability > 99.8%; the tests allow exactly that, stated beside each assertion.
"""

from __future__ import annotations

import math

import numpy as np

DELTA = 1e-5
ALPHA = 0.05


def mc_tolerance(rate: float, R: int) -> float:
    """Three standard errors of a Monte-Carlo frequency over R experiments."""
    return 3 * math.sqrt(rate * (1 - rate) / R)


def randomised_response(eps: float, R: int, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """R experiments of n members and n non-members through ε-DP randomised response: a member reports 1 with
    probability e^ε/(1 + e^ε), a non-member with 1/(1 + e^ε); TPR/FPR = e^ε exactly (tight)."""
    p = math.exp(eps) / (1 + math.exp(eps))
    truth = np.array([1] * n + [0] * n, dtype=bool)
    u = rng.random((R, 2 * n))
    return np.where(truth, u < p, u >= p).astype(float), truth


def gaussian_scores(mu: float, R: int, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Scores from the Gaussian mechanism's trade-off at μ (μ-GDP, exactly (ε(δ), δ)-DP for every δ)."""
    truth = np.array([1] * n + [0] * n, dtype=bool)
    return rng.normal(size=(R, 2 * n)) + mu * truth, truth
