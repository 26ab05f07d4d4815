"""arena.games.audit.verdict: which tests join the canary audit's verdict, at which Bonferroni level, and that on
synthetic Poisson-subsampled Dirac canaries a correct claim stands while half the noise is refuted by the
canaries' own bounds (σ fit and the f-DP test of the claim's curve), not by the claim check."""

from __future__ import annotations

import math

import numpy as np
import pytest

from arena.contracts.defense import Claim
from arena.games.audit.claim_check import ClaimCheck
from arena.games.audit.verdict import analyse, fitted_kind, mechanism, n_tests
from arena.privacy.accounting import calibrate_noise

Q, T, DELTA = 0.2, 250, 1e-5


def test_which_tests_join_and_the_bonferroni_factor() -> None:
    sub = {"epsilon": 4.0, "delta": DELTA, "noise_multiplier": 3.5, "sample_rate": Q, "steps": T}
    bare = {"epsilon": 4.0, "delta": DELTA}
    assert mechanism(sub) == (3.5, Q, T) and mechanism(bare) is None
    assert mechanism({**sub, "noise_multiplier": float("inf")}) is None and mechanism({**sub, "delta": 0.0}) is None
    assert fitted_kind(sub, ["gradient", "input"], True) == "gradient"
    assert fitted_kind(sub, ["gradient"], False) is None and fitted_kind(bare, ["gradient"], True) is None
    assert n_tests(sub, ["gradient", "input"], True) == 5  # one-run ×2, f-DP ×2, σ fit
    assert n_tests(sub, ["gradient"], False) == 2 and n_tests(bare, ["gradient", "input"], True) == 2


def _scores(sigma: float, K: int, m: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    bits = rng.random((K, m)) < 0.5
    return rng.binomial(T, Q, size=(K, m)) * bits + rng.normal(size=(K, m)) * math.sqrt(T) * sigma, bits


@pytest.mark.slow  # the claim's PLD curve and the accountant: a few seconds of CPU
def test_half_the_noise_is_refuted_by_the_canaries_and_a_correct_claim_stands() -> None:
    rng = np.random.default_rng(3)
    sigma, eps = calibrate_noise(4.0, Q, T, DELTA, "pld")
    claim = Claim(epsilon=eps, delta=DELTA, accountant="pld", noise_multiplier=sigma, sample_rate=Q, steps=T)
    check = ClaimCheck(eps, 1, 0, 0, True)  # what the engine saw: the claim's own arithmetic holds
    s, t = _scores(sigma, 64, 128, rng)
    ok = analyse(claim, {"gradient": s}, {"gradient": t}, 64, check=check)
    assert ok.gaussian == "gradient" and set(ok.bounds()) == {"gradient.one_run", "gradient.sigma_fit"}
    assert ok.kinds[0].alpha_bound == pytest.approx(0.05 / 3)
    assert not ok.flagged and 0.5 * eps < ok.lower_bound <= eps
    s, t = _scores(sigma / 2, 64, 128, rng)
    bad = analyse(claim, {"gradient": s}, {"gradient": t}, 64, check=check)
    assert bad.kinds[0].sigma.epsilon > 2 * eps and bad.curve_refuted and bad.flagged and bad.claim_consistent
    print(f"\nsubsampled (q = {Q}, T = {T}), 8,192 canaries, claim ε = {eps:.2f}: correct run ε ≥ "
          f"{ok.lower_bound:.2f}; "
          f"half the noise: σ fit ε ≥ {bad.kinds[0].sigma.epsilon:.2f}, one-run {bad.kinds[0].one_run.epsilon:.2f}, "
          f"claim's curve rejected {bad.curve_refuted}")
