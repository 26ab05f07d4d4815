"""arena.privacy.heldout: the held-out Clopper–Pearson bound, its split, its threshold chosen without the
evaluation half, and its false-positive rate simulated on mechanisms exactly at their ε (see tests.privacy.simulate
for the Monte-Carlo tolerances)."""

from __future__ import annotations

import numpy as np
import pytest

from arena.privacy.binomial import max_certifiable
from arena.privacy.gdp import gdp_mu
from arena.privacy.heldout import as_batch, cp_objective, cuts, heldout_epsilon, heldout_epsilon_batch, split_halves
from tests.privacy.simulate import ALPHA, DELTA, gaussian_scores, mc_tolerance, randomised_response


def test_split_halves_is_per_class_seeded_and_balanced() -> None:
    truth = np.array([1] * 101 + [0] * 99)
    sel = split_halves(truth, seed=3)
    assert (sel & (truth == 1)).sum() == 50 and (sel & (truth == 0)).sum() == 49
    assert np.array_equal(sel, split_halves(truth, seed=3)) and not np.array_equal(sel, split_halves(truth, 4))
    rows = np.stack([truth, truth[::-1]])  # different layouts per row take the sorting path
    sel2 = split_halves(rows, seed=0)
    assert [(s & (t == 1)).sum() for s, t in zip(sel2, rows)] == [50, 50]


def test_heldout_bound_on_perfect_separation_is_max_certifiable_of_the_evaluation_half() -> None:
    truth = np.array([1] * 101 + [0] * 99)
    scores = truth * 10.0 + np.random.default_rng(0).normal(size=200)
    b = heldout_epsilon(scores, truth, DELTA)
    assert (b.n_pos, b.n_neg, b.n_pos_total, b.n_neg_total) == (51, 50, 101, 99)
    assert b.epsilon == pytest.approx(max_certifiable(51, 50, ALPHA, DELTA)) == b.max_certifiable
    assert (b.true_positives, b.false_positives, b.direction) == (51, 0, "higher")
    # Members scoring lower: the side is chosen on the selection half too, same bound.
    low = heldout_epsilon(-scores, truth, DELTA)
    assert low.epsilon == pytest.approx(b.epsilon) and low.direction == "lower"
    # Only the order matters.
    assert heldout_epsilon(np.exp(scores / 3), truth, DELTA).epsilon == pytest.approx(b.epsilon)
    # 100 + 100 points: 50 + 50 evaluate, so the most it can show is 2.57, not the 3.28 of the whole sample.
    assert max_certifiable(50, 50, ALPHA, DELTA) == pytest.approx(2.5696, abs=1e-4)


def test_heldout_threshold_is_chosen_without_the_evaluation_half() -> None:
    rng = np.random.default_rng(1)
    truth = np.array([1] * 200 + [0] * 200)
    scores = rng.normal(size=400) + truth
    sel = split_halves(truth, 0)
    b = heldout_epsilon(scores, truth, DELTA, seed=0)
    # Scrambling the evaluation half leaves the chosen test alone; only its counts change.
    scrambled = scores.copy()
    scrambled[~sel] = rng.permutation(scrambled[~sel])
    c = heldout_epsilon(scrambled, truth, DELTA, seed=0)
    assert (c.threshold, c.direction or "higher") == (b.threshold, b.direction or "higher")
    flagged = scrambled[~sel] >= c.threshold
    assert c.true_positives == int((flagged & (truth[~sel] == 1)).sum())
    assert c.false_positives == int((flagged & (truth[~sel] == 0)).sum())


# ----------------------------------------------------------------------------- mechanisms exactly at their ε


@pytest.mark.slow
def test_heldout_flag_calibration_on_randomised_response_and_power_at_twice_epsilon() -> None:
    rng = np.random.default_rng(12)
    R, n, eps = 2000, 500, 1.0
    tol = mc_tolerance(ALPHA, R)  # 0.0146
    at, truth = randomised_response(eps, R, n, rng)
    lb, _ = heldout_epsilon_batch(at, truth, 0.0, ALPHA, seed=1)
    fpr = float((lb > eps).mean())
    double, _ = randomised_response(2 * eps, R, n, rng)
    lb2, _ = heldout_epsilon_batch(double, truth, 0.0, ALPHA, seed=1)
    power = float((lb2 > eps).mean())
    print(f"\nheld-out CP, randomised response ε = {eps}, {n} + {n}: false-positive rate {fpr:.4f} "
          f"(nominal {ALPHA}), power at 2ε {power:.3f}, median bound at 2ε {np.median(lb2):.2f}")
    assert fpr <= ALPHA + tol
    assert power > 0.9  # a flag that cannot see a mechanism leaking twice its claim fails here


def test_heldout_flag_calibration_on_the_gaussian_trade_off() -> None:
    rng = np.random.default_rng(13)
    R, n, eps = 1000, 500, 2.0
    mu, mu2 = gdp_mu(eps, DELTA), gdp_mu(2 * eps, DELTA)
    at, truth = gaussian_scores(mu, R, n, rng)
    lb, _ = heldout_epsilon_batch(at, truth, DELTA, ALPHA, seed=2)
    fpr = float((lb > eps).mean())
    double, _ = gaussian_scores(mu2, R, n, rng)
    lb2, _ = heldout_epsilon_batch(double, truth, DELTA, ALPHA, seed=2)
    power = float((lb2 > eps).mean())
    print(f"\nheld-out CP, Gaussian μ = {mu:.3f} (ε = {eps} at δ = {DELTA}), {n} + {n}: false-positive rate {fpr:.4f}, "
          f"power at 2ε (μ = {mu2:.3f}) {power:.3f}, median bound there {np.median(lb2):.2f}")
    assert fpr <= ALPHA + mc_tolerance(ALPHA, R)
    # A Gaussian's (ε, δ) at δ = 1e-5 is decided in tails 1000 points cannot reach: no power here, by design
    # of the statistics, not a bug. The median bound still grows with the leak.
    assert np.median(lb2) > np.median(lb)


def _best_of_all_thresholds(scores: np.ndarray, truth: np.ndarray, delta: float) -> np.ndarray:
    """The old audit's statistic: the Clopper–Pearson bound maximised over every threshold and side of the same
    points that it is then computed on (no held-out half, no correction)."""
    objective = cp_objective(delta, ALPHA)
    scores, truth = as_batch(scores, truth)
    n_pos = int(truth[0].sum())
    best = np.zeros(scores.shape[0])
    for sign in (1.0, -1.0):
        tp, fp, valid, _ = cuts(sign * scores, truth)
        val = np.where(valid, objective(tp, n_pos, fp, truth.shape[1] - n_pos), -np.inf)
        best = np.maximum(best, val.max(axis=-1))
    return best


@pytest.mark.slow
def test_laplace_mechanism_old_statistic_over_fires_the_held_out_one_does_not() -> None:
    # The Laplace mechanism (sensitivity 1, scale 1/ε) is exactly ε-DP and tight in its tails. Issue 12 measured
    # the old flag firing 8–12% of the time at 1000 + 1000 points; here: about 9.5%, against ≤ 5% held out.
    rng = np.random.default_rng(18)
    R, n, eps = 1000, 1000, 1.0
    truth = np.array([1] * n + [0] * n, dtype=bool)
    scores = rng.laplace(size=(R, 2 * n)) / eps + truth
    old = float((_best_of_all_thresholds(scores, truth, 0.0) > eps).mean())
    lb, _ = heldout_epsilon_batch(scores, truth, 0.0, ALPHA, seed=4)
    fpr = float((lb > eps).mean())
    double = rng.laplace(size=(R, 2 * n)) / (2 * eps) + truth
    lb2, _ = heldout_epsilon_batch(double, truth, 0.0, ALPHA, seed=4)
    power = float((lb2 > eps).mean())
    print(f"\nLaplace mechanism ε = {eps}, {n} + {n}: best-of-all-thresholds flag fires {old:.3f}, held-out "
          f"{fpr:.3f} (nominal {ALPHA}); held-out power at 2ε {power:.3f}")
    assert old > ALPHA  # the bug the held-out split fixes
    assert fpr <= ALPHA + mc_tolerance(ALPHA, R)
    assert power > 0.5
