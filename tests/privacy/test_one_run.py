"""arena.privacy.one_run: the one-run bound of Steinke, Nasr & Jagielski 2023 by hand, its calibration on
randomised-response and Gaussian canaries, its growth with m, and paired canaries for a replace-one game (see
tests.privacy.simulate for the Monte-Carlo tolerances)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from arena.privacy.gdp import gdp_mu
from arena.privacy.one_run import (
    guess_grid,
    one_run_counts,
    one_run_epsilon,
    one_run_epsilon_batch,
    one_run_epsilon_from_counts,
    one_run_p_value,
    paired_canaries,
    scale_guess_set,
)
from tests.privacy.simulate import ALPHA, DELTA, mc_tolerance


def test_one_run_p_value_hand_computed() -> None:
    # m = 10, r = 3, v = 2 at ε = 0 (p = ½): β = Pr[B ≥ 2] = 0.5, Pr[B ≥ 1] = 0.875, Pr[B ≥ 0] = 1;
    # max((0.875 − 0.5)/1, (1 − 0.5)/2) = 0.375; with δ = 0.01: 0.5 + 2·10·0.01·0.375 = 0.575.
    assert one_run_p_value(10, 3, 2, 0.0) == pytest.approx(0.5)
    assert one_run_p_value(10, 3, 2, 0.0, 0.01) == pytest.approx(0.575)
    assert one_run_p_value(1000, 100, 90, 2.0) == pytest.approx(binom.sf(89, 100, 1 / (1 + math.exp(-2))))


def test_one_run_epsilon_is_where_the_p_value_reaches_alpha() -> None:
    e0 = one_run_epsilon_from_counts(1000, 100, 90, ALPHA)
    assert one_run_p_value(1000, 100, 90, e0) == pytest.approx(ALPHA, rel=1e-6)
    e1 = one_run_epsilon_from_counts(1000, 100, 90, ALPHA, delta=1e-3)
    assert one_run_p_value(1000, 100, 90, e1, 1e-3) == pytest.approx(ALPHA, rel=1e-4)
    assert 0 < e1 < e0  # δ weakens the evidence
    assert one_run_epsilon_from_counts(1000, 100, 50, ALPHA) == 0.0  # chance accuracy shows nothing


def test_one_run_guesses_top_and_bottom_scores() -> None:
    truth = np.array([1, 1, 0, 1, 0, 0, 1, 0], dtype=bool)
    scores = np.array([9, 8, 7, 1, 2, 0, 3, 5], dtype=float)  # order: 9 8 7 5 3 2 1 0
    b = one_run_epsilon(scores, truth, grid=[(2, 2), (3, 0)])
    # (2, 2): in = {9, 8} both right; out = {1, 0}: 0 right (out), 1 wrong (in) → 3 of 4. (3, 0): 2 of 3.
    assert (b.grid_size, b.m) == (2, 8)
    v, r = one_run_counts(scores[None], truth[None], [(2, 2), (3, 0)], seed=0)
    assert v.tolist() == [[3, 2]] and r.tolist() == [[4, 3]]
    with pytest.raises(ValueError):
        one_run_epsilon(scores, truth, grid=[(5, 5)])


@pytest.mark.slow
def test_one_run_calibration_on_randomised_response_and_power_at_twice_epsilon() -> None:
    rng = np.random.default_rng(14)
    R, m, eps = 2000, 1000, 1.0

    def canaries(e):
        included = rng.random((R, m)) < 0.5
        p = math.exp(e) / (1 + math.exp(e))
        return np.where(rng.random((R, m)) < p, included, ~included).astype(float), included

    s, inc = canaries(eps)
    lb = one_run_epsilon_batch(s, inc, ALPHA, seed=1)
    s2, inc2 = canaries(2 * eps)
    lb2 = one_run_epsilon_batch(s2, inc2, ALPHA, seed=1)
    fpr, power = float((lb > eps).mean()), float((lb2 > eps).mean())
    print(f"\none run, randomised-response canaries ε = {eps}, m = {m}, grid of {len(guess_grid(m))}: "
          f"false-positive rate {fpr:.4f}, power at 2ε {power:.3f}, median bound at ε {np.median(lb):.2f}")
    assert fpr <= ALPHA + mc_tolerance(ALPHA, R)
    assert power > 0.9


@pytest.mark.slow
def test_one_run_with_delta_calibration_on_gaussian_canaries() -> None:
    rng = np.random.default_rng(15)
    R, m, eps = 200, 500, 2.0
    mu = gdp_mu(eps, DELTA)
    included = rng.random((R, m)) < 0.5
    scores = rng.normal(size=(R, m)) + mu * included
    lb = one_run_epsilon_batch(scores, included, ALPHA, delta=DELTA, seed=2)
    fpr = float((lb > eps).mean())
    print(f"\none run (ε, δ), Gaussian canaries μ = {mu:.3f}, m = {m}: false-positive rate {fpr:.3f} "
          f"(R = {R}), median bound {np.median(lb):.2f}")
    assert fpr <= ALPHA + mc_tolerance(ALPHA, R)  # 0.046 with R = 200


def test_one_run_bound_on_randomised_response_approaches_epsilon_as_m_grows() -> None:
    # Steinke et al. 2023 (their idealised randomised-response setting): the bound never exceeds ε with high
    # probability and tends to ε as the number of canaries grows. Measured medians for ε = 2 (20 runs each, all
    # canaries guessed wins for binary scores): m = 100 → 1.12, 1000 → 1.70, 10,000 → 1.91.
    rng = np.random.default_rng(16)
    eps, R = 2.0, 20
    p = math.exp(eps) / (1 + math.exp(eps))
    medians = {}
    for m in (100, 1000, 10_000):
        included = rng.random((R, m)) < 0.5
        scores = np.where(rng.random((R, m)) < p, included, ~included).astype(float)
        lb = one_run_epsilon_batch(scores, included, ALPHA, seed=3)
        medians[m] = float(np.median(lb))
        assert (lb <= eps).mean() >= 0.9
    print(f"\none run, randomised response ε = {eps}: median bound by m {medians}")
    assert medians[100] < medians[1000] < medians[10_000]
    assert medians[10_000] >= 0.8 * eps  # the brief asked ≥ 0.6ε; measured ≈ 0.95ε


def test_paired_canaries_turn_a_replace_one_game_into_one_run_canaries() -> None:
    scores = np.array([0.9, 0.1, 0.3, 0.8, 0.5, 0.4])
    truth = np.array([1, 0, 0, 1, 1, 0])
    pair = np.array([7, 7, 3, 3, 5, 5])
    diff, first_in = paired_canaries(scores, truth, pair)
    # pairs sorted by id: 3 → (0.3, 0.8) first out; 5 → (0.5, 0.4) first in; 7 → (0.9, 0.1) first in
    assert np.allclose(diff, [-0.5, 0.1, 0.8]) and first_in.tolist() == [False, True, True]
    with pytest.raises(ValueError, match="exactly one member"):
        paired_canaries(scores, np.array([1, 1, 0, 1, 1, 0]), pair)


@pytest.mark.parametrize("n", [7, 149, 150, 151, 1001])
def test_a_held_out_bound_never_guesses_more_canaries_than_its_half_holds(n: int) -> None:
    """Scaling the chosen guess set from the selection half to the evaluation half keeps k+ + k- <= m (an odd count
    made the all-canaries set of 74 into 76 guesses of 75), with every guess right or none."""
    truth = np.arange(n) % 2
    for scores in (truth.astype(float), -truth.astype(float)):
        bound = one_run_epsilon(scores, truth, delta=DELTA)
        assert bound.k_plus + bound.k_minus <= bound.m and 0 <= bound.correct <= bound.guesses <= bound.m
    assert scale_guess_set((37, 37), 74, 75) == (38, 37)


@pytest.mark.parametrize("delta", [0.0, 1e-5])
@pytest.mark.parametrize("grid", [None, [(1, 0), (20, 20), (100, 0)]])
def test_the_batch_is_each_row_alone_bit_for_bit_ties_included(delta: float, grid) -> None:
    """Computed together, R experiments give what each gives alone: the held-out or grid selection, the
    (ε, δ) bisections and the tie-breaks (rounded scores tie) are per row."""
    rng = np.random.default_rng(11)
    truth = rng.random((6, 400)) < 0.5
    scores = np.round(rng.normal(size=(6, 400)) + np.array([0, 0.5, 1, 2, 3, 4])[:, None] * truth, 1)
    batch = one_run_epsilon_batch(scores, truth, ALPHA, delta, grid, seed=4)
    alone = [one_run_epsilon(scores[i], truth[i], ALPHA, delta, grid, seed=4).epsilon for i in range(6)]
    assert batch.tolist() == alone
    assert batch[0] < batch[-1] and batch[-1] > 1.0  # and the rows differ: the scores drive them
