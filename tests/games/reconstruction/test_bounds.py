"""Reconstruction bounds: hand-computed values, the ordering between them, and the PLD bound against Monte Carlo."""

from __future__ import annotations

import math

import pytest
from scipy.stats import norm

from arena.games.reconstruction.bounds import (
    dp_bound,
    dpsgd_bound,
    gdp_bound,
    monte_carlo_bound,
    subsampled_gaussian_bound,
    tradeoff_dp_bound,
)
from arena.privacy.accounting import epsilon
from arena.privacy.tradeoff import dpsgd_mu


def test_dp_bound_by_hand() -> None:
    assert dp_bound(1.0, 1e-5, 0.02) == pytest.approx(math.e * 0.02 + 1e-5)
    assert dp_bound(8.0, 1e-5, 0.02) == 1.0  # e^8 · 0.02 ≈ 59.6: vacuous
    assert dp_bound(1e6, 0.0, 1e-300) == 1.0  # no overflow
    assert dp_bound(3.0, 1e-6, 0.0) == 1e-6


def test_tradeoff_bound_by_hand_and_never_above_dp_bound() -> None:
    # e^8 κ is vacuous; the other branch: 1 − e^{−8}(1 − δ − κ) = 1 − 3.3546e-4 × 0.97999
    assert tradeoff_dp_bound(8.0, 1e-5, 0.02) == pytest.approx(1 - math.exp(-8) * (1 - 1e-5 - 0.02))
    # small κ: the first branch is the smaller one, as in dp_bound
    assert tradeoff_dp_bound(1.0, 0.0, 0.01) == pytest.approx(math.e * 0.01)
    # ε = 1, κ = 0.5: e/2 ≈ 1.36 is vacuous, 1 − e^{−1}/2 ≈ 0.816 is not
    assert tradeoff_dp_bound(1.0, 0.0, 0.5) == pytest.approx(1 - math.exp(-1) / 2)
    for eps in (0.1, 1.0, 4.0, 8.0):
        for kappa in (0.001, 0.02, 0.3):
            assert tradeoff_dp_bound(eps, 1e-5, kappa) <= dp_bound(eps, 1e-5, kappa) + 1e-15


def test_gdp_bound_by_hand() -> None:
    assert dpsgd_mu(5.0, 100) == 2.0  # full batch: μ = √T/σ
    assert gdp_bound(0.0, 0.1) == pytest.approx(0.1)  # no information: the prior's mass
    assert gdp_bound(1.0, 0.5) == pytest.approx(0.8413447460685429)  # Φ(0 + 1)
    assert gdp_bound(2.0, float(norm.cdf(-2.0))) == pytest.approx(0.5)  # Φ(−2 + 2)
    assert gdp_bound(3.0, 0.0) == 0.0 and gdp_bound(3.0, 1.0) == 1.0
    with pytest.raises(ValueError):
        gdp_bound(1.0, 1.5)


def test_pld_bound_at_full_batch_matches_the_closed_form_from_above() -> None:
    exact = gdp_bound(dpsgd_mu(2.0, 25), 0.1)  # μ = 2.5
    pld = subsampled_gaussian_bound(0.1, 2.0, 1.0, 25)
    assert exact <= pld <= exact + 1e-3


def test_subsampling_lowers_the_bound() -> None:
    full, _ = dpsgd_bound(0.05, 2.0, 1.0, 50)
    sub, how = dpsgd_bound(0.05, 2.0, 0.1, 50)
    assert sub < full and "PLD" in how


@pytest.mark.slow
def test_pld_bound_agrees_with_hayes_et_al_monte_carlo() -> None:
    pld = subsampled_gaussian_bound(0.1, 1.0, 0.1, 30)
    mc = monte_carlo_bound(0.1, 1.0, 0.1, 30, samples=200_000, seed=1)
    # the MC standard error is about sqrt(0.28 × 0.72 / 2e5) ≈ 0.001
    assert abs(pld - mc) < 0.006


def test_the_issues_figure_at_epsilon_8() -> None:
    """σ = 4.22, q = 0.32, 400 steps claims ε ≈ 7.9 (RDP, δ = 1e-5); with κ = 0.02 e^ε κ + δ is vacuous (1.0),
    the DP-SGD bound is about 0.30."""
    eps = epsilon(4.22, 0.32, 400, 1e-5, "rdp")
    assert 7.5 < eps < 8.0
    assert dp_bound(eps, 1e-5, 0.02) == 1.0
    bound, _ = dpsgd_bound(0.02, 4.22, 0.32, 400)
    assert 0.28 < bound < 0.32
