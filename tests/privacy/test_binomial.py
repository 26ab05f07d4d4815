"""arena.privacy.binomial: one-sided Clopper–Pearson ends against scipy's exact interval, rates → ε by hand, and the
most a sample of a given size can certify."""

from __future__ import annotations

import math

import pytest
from scipy.stats import binomtest

from arena.privacy.binomial import clopper_pearson, cp_lower, cp_upper, epsilon_from_counts, max_certifiable
from tests.privacy.simulate import ALPHA, DELTA


def test_one_sided_clopper_pearson_ends_and_a_hand_computed_bound() -> None:
    n = 100
    # The one-sided bound at α/2 is the end of the two-sided (1 − α) exact interval.
    ci = binomtest(60, n).proportion_ci(0.95, method="exact")
    assert float(cp_lower(60, n, 0.025)) == pytest.approx(ci.low, abs=1e-12)
    assert float(cp_upper(60, n, 0.025)) == pytest.approx(ci.high, abs=1e-12)
    low, high = clopper_pearson(60, n)  # the two-sided interval: both ends at once
    assert (float(low), float(high)) == (pytest.approx(ci.low, abs=1e-12), pytest.approx(ci.high, abs=1e-12))
    # Edges in closed form: nothing seen → upper 1 − α^(1/n); everything → lower α^(1/n).
    assert (float(cp_lower(0, n, 0.05)), float(cp_upper(0, n, 0.05))) == (0.0, pytest.approx(1 - 0.05 ** (1 / n)))
    assert (float(cp_lower(n, n, 0.05)), float(cp_upper(n, n, 0.05))) == (pytest.approx(0.05 ** (1 / n)), 1.0)
    # 60/100 positives and 10/100 negatives flagged by a fixed test, α = 0.05 split 0.025 + 0.025:
    # TPR_lo = 0.49721, FPR_hi = 0.17622: forward log((0.49721 − δ)/0.17622) = 1.0372 beats backward
    # log((1 − 0.17622 − δ)/(1 − 0.49721)) = 0.4937.
    eps = float(epsilon_from_counts(60, n, 10, n, DELTA, ALPHA))
    assert eps == pytest.approx(math.log((ci.low - DELTA) / binomtest(10, n).proportion_ci(0.95, "exact").high))
    assert eps == pytest.approx(1.0372, abs=1e-4)
    # All positives, half the negatives flagged: the backward term (negatives cleared) is the evidence, 2.3977.
    assert float(epsilon_from_counts(100, n, 50, n, DELTA)) == pytest.approx(2.3977132969689388, abs=1e-9)
    assert float(epsilon_from_counts(50, n, 50, n, DELTA)) == 0.0  # no evidence: 0, never negative


def test_max_certifiable_is_perfect_separation() -> None:
    c = 0.025 ** (1 / 100)
    assert max_certifiable(100, 100, ALPHA, DELTA) == pytest.approx(math.log((c - DELTA) / (1 - c)), abs=1e-12)
    assert max_certifiable(100, 100, ALPHA, DELTA) == pytest.approx(3.2813, abs=1e-4)  # the 3.28
    assert max_certifiable(1000, 1000, ALPHA, DELTA) > max_certifiable(100, 100, ALPHA, DELTA)
    assert max_certifiable(100, 100, ALPHA, 0.99) == 0.0  # a δ this large silences every test
