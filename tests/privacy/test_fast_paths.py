"""The audit's fast paths give the figures of the computations they replaced, on hand-made inputs: the one-run
p-values from cached log-binomial coefficients (was scipy's pmf per ε), the largest certifiable bound computed once
per design, the descending order without a tie-break where nothing ties (was lexsort), the dual of a privacy profile
from the lines that can reach its supremum (was every line at every α) and a PLD's δ(ε) from cumulative sums (was
dp_accounting's loop over its support)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit
from scipy.stats import binom

from arena.privacy import one_run, tradeoff
from arena.privacy.one_run import (
    guess_grid,
    one_run_counts,
    one_run_epsilon_from_counts,
    one_run_max_certifiable,
    one_run_p_values,
)

CASES = [(1000, 100, 80), (32768, 656, 429), (4096, 410, 230), (500, 500, 500), (64, 10, 1), (20000, 2000, 1990)]


def _p_values_before(m: int, r: int, v: int, epsilons: np.ndarray, delta: float) -> np.ndarray:
    """The p-values as computed before: scipy's binomial pmf at every ε."""
    p = expit(np.asarray(epsilons, np.float64))
    b = binom.sf(v - 1, r, p)
    pmf = binom.pmf(np.arange(v - 1, -1, -1), r, p[..., None])
    window = np.cumsum(pmf, axis=-1) / np.arange(1, v + 1)
    return np.minimum(1.0, b + 2 * m * delta * window.max(axis=-1))


def _bisect_before(m: int, r: int, v: int, alpha: float, delta: float, tol: float = 1e-6) -> float:
    """``one_run_epsilon_from_counts`` as it was, on the old p-values."""
    hi = one_run_epsilon_from_counts(m, r, v, alpha, 0.0)

    def p(e: float) -> float:
        return float(_p_values_before(m, r, v, np.asarray(e), delta))

    if hi == 0.0 or p(0.0) > alpha:
        return 0.0
    if p(hi) <= alpha:
        return hi
    lo = 0.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if p(mid) <= alpha else (lo, mid)
    return lo


@pytest.mark.parametrize(("m", "r", "v"), CASES)
def test_one_run_p_values_equal_the_pmf_computation_to_1e_9(m, r, v) -> None:
    eps = np.array([0.0, 0.05, 0.3, 1.0, 2.5, 6.0, 11.0])
    new, old = one_run_p_values(m, r, v, eps, 1e-5), _p_values_before(m, r, v, eps, 1e-5)
    assert np.allclose(new, old, rtol=1e-9, atol=1e-300)
    assert np.array_equal(one_run_p_values(m, r, v, eps, 0.0), np.minimum(1.0, binom.sf(v - 1, r, expit(eps))))


@pytest.mark.parametrize(("m", "r", "v"), CASES[:4])
def test_one_run_bounds_are_the_bisection_on_the_old_p_values(m, r, v) -> None:
    for alpha in (0.05, 0.01):
        assert one_run_epsilon_from_counts(m, r, v, alpha, 1e-5) == _bisect_before(m, r, v, alpha, 1e-5)


def test_max_certifiable_is_computed_once_per_design_and_is_the_best_guess_set() -> None:
    one_run._max_certifiable.cache_clear()
    grid = guess_grid(2000)
    first = one_run_max_certifiable(2000, grid, 0.01, 1e-5)
    again = one_run_max_certifiable(2000, list(reversed(grid)), 0.01, 1e-5)  # the same design in another order
    assert one_run._max_certifiable.cache_info().hits == 1 and again == first
    best = max(_bisect_before(2000, kp + km, kp + km, 0.01, 1e-5) for kp, km in grid)
    assert first == best


def test_the_descending_order_breaks_ties_at_random_only_where_scores_tie() -> None:
    rng = np.random.default_rng(3)
    truth = rng.random((2, 400)) < 0.5
    grid = ((10, 0), (10, 10), (200, 200))
    for scores in (rng.normal(size=(2, 400)), np.round(rng.normal(size=(2, 400)), 1)):  # no ties; many ties
        u = np.random.default_rng(7).random(scores.shape)
        y = np.take_along_axis(truth, np.lexsort((u, -scores), axis=-1), axis=-1).astype(np.int64)
        top = np.concatenate([np.zeros((2, 1), np.int64), np.cumsum(y, axis=-1)], axis=-1)
        v_before = np.stack([top[:, kp] + (km - (top[:, -1] - top[:, 400 - km])) for kp, km in grid], axis=-1)
        v, r = one_run_counts(scores, truth, grid, 7)
        assert np.array_equal(v, v_before) and r.tolist() == [[10, 20, 400]] * 2


def _dual_before(alpha: np.ndarray, eps: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    """``tradeoff_from_profile`` as it was: every line of the profile at every α."""
    flat = np.clip(np.asarray(alpha, np.float64), 0.0, 1.0).reshape(-1)
    e = np.exp(np.minimum(eps, 700.0))
    lines = np.maximum(1.0 - deltas - e * flat[:, None], (1.0 - deltas - flat[:, None]) / e)
    return np.maximum(lines.max(axis=1), 0.0).reshape(np.shape(alpha))


def test_the_dual_of_a_profile_equals_every_line_at_every_alpha_bit_for_bit() -> None:
    rng = np.random.default_rng(5)
    eps = np.linspace(0.0, 12.0, 600)
    for deltas in (np.exp(-eps) * 0.4, np.clip(1 - np.tanh(eps / 3), 0, 1), np.sort(rng.random(600))[::-1]):
        for alpha in (1 - np.concatenate([[0.0], np.logspace(-15, 0, 3000)]), rng.random((7, 300)),
                      np.array([0.0, 1.0, 0.5, 1e-300])):
            assert np.array_equal(tradeoff.tradeoff_from_profile(alpha, eps, deltas), _dual_before(alpha, eps, deltas))


@pytest.mark.parametrize(("sigma", "q", "steps"), [(1.0, 0.2, 20), (0.7, 0.05, 50), (2.0, 1.0, 5)])
def test_a_pld_delta_profile_is_dp_accountings_own_bit_for_bit(sigma, q, steps) -> None:
    from dp_accounting.pld import privacy_loss_distribution

    from arena.privacy.accounting import neighboring_relation

    for relation in ("add_remove", "replace_one"):
        pld = privacy_loss_distribution.from_gaussian_mechanism(
            sigma, sampling_prob=q, neighboring_relation=neighboring_relation(relation),
            value_discretization_interval=1e-2).self_compose(steps)
        eps = np.linspace(0.0, float(pld.get_epsilon_for_delta(1e-12)) + 1.0, 500)
        assert np.array_equal(tradeoff.hockey_stick(pld, eps), np.asarray(pld.get_delta_for_epsilon(eps)))
