"""arena.privacy.tradeoff: the trade-off curve of a claim (hand values, the PLD dual against the closed form, the
implied ε against the accountant)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from arena.privacy.accounting import epsilon_under
from arena.privacy.relations import replace_one_claim
from arena.privacy.tradeoff import (
    claim_tradeoff,
    dpsgd_mu,
    dpsgd_tradeoff,
    eps_delta_tradeoff,
    gaussian_tradeoff,
    implied_epsilon,
    pld_profile,
    tradeoff_from_profile,
)

ALPHA = np.logspace(-6, 0, 400)  # the FPR range a report draws
FINE = np.logspace(-30, 0, 6000)  # the implied ε at δ = 1e-5 is decided at FPRs far below what a plot shows


def test_gaussian_tradeoff_hand_values() -> None:
    # μ = 1 at α = 0.05: Φ(Φ⁻¹(0.95) − 1) = Φ(1.6449 − 1) = Φ(0.6449) = 0.7405
    assert float(gaussian_tradeoff(0.05, 1.0)) == pytest.approx(0.7405, abs=1e-4)
    # μ = 0: the identity 1 − α (no test does better than chance); μ = ∞: 0 (perfect tests)
    np.testing.assert_allclose(gaussian_tradeoff(ALPHA, 0.0), 1.0 - ALPHA, atol=1e-12)
    np.testing.assert_array_equal(gaussian_tradeoff(ALPHA, math.inf), 0.0)


def test_dpsgd_mu_of_full_batch_dpsgd() -> None:
    assert dpsgd_mu(2.0, 4, "add_remove") == pytest.approx(1.0)  # √4 / 2
    assert dpsgd_mu(2.0, 4, "replace_one") == pytest.approx(2.0)  # sensitivity 2C doubles μ
    assert dpsgd_mu(0.0, 4) == math.inf
    assert dpsgd_mu(2.0, 0) == 0.0
    with pytest.raises(ValueError, match="relation"):
        dpsgd_mu(1.0, 1, "swap")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="steps >= 0"):
        dpsgd_mu(-1.0, 4)


def test_eps_delta_tradeoff_hand_values() -> None:
    eps, delta = math.log(2.0), 0.1
    # α = 0.1: max(0, 1 − 0.1 − 2·0.1, (1 − 0.1 − 0.1)/2) = max(0.7, 0.4) = 0.7
    assert float(eps_delta_tradeoff(0.1, eps, delta)) == pytest.approx(0.7)
    # α = 0.5: max(0, 0.9 − 1.0, (0.9 − 0.5)/2) = 0.2
    assert float(eps_delta_tradeoff(0.5, eps, delta)) == pytest.approx(0.2)
    # α = 0.95: both lines below zero
    assert float(eps_delta_tradeoff(0.95, eps, delta)) == 0.0
    # the region's TPR bound min(e^ε·FPR + δ, 1 − e^{−ε}(1 − δ − FPR)) is 1 − f
    fpr = np.array([1e-4, 0.01, 0.2, 0.6])
    expected = np.minimum(2.0 * fpr + delta, 1 - (1 - delta - fpr) / 2.0)
    np.testing.assert_allclose(1 - eps_delta_tradeoff(fpr, eps, delta), np.minimum(expected, 1.0))


@pytest.mark.slow
@pytest.mark.parametrize(("relation", "mu"), [("add_remove", 1.0), ("replace_one", 2.0)])
def test_full_batch_pld_dual_matches_gaussian_dp(relation: str, mu: float) -> None:
    """q = 1: the dual of dp_accounting's PLD profile is the closed-form Gaussian curve to 1e-3 (σ = 2, 4 steps:
    μ = 1 add/remove, 2 replace-one: the PLD doubles the Gaussian's sensitivity under replace-one)."""
    eps, deltas = pld_profile(2.0, 1.0, 4, relation)
    f = tradeoff_from_profile(ALPHA, eps, deltas)
    np.testing.assert_allclose(f, gaussian_tradeoff(ALPHA, mu), atol=1e-3)
    assert float(tradeoff_from_profile(0.05, eps, deltas)) == pytest.approx(norm.cdf(norm.isf(0.05) - mu), abs=1e-3)
    # and dpsgd_tradeoff takes the closed form for q = 1
    np.testing.assert_allclose(dpsgd_tradeoff(ALPHA, 2.0, 1.0, 4, relation), gaussian_tradeoff(ALPHA, mu))


@pytest.mark.slow
def test_subsampled_curve_lies_between_full_batch_and_identity() -> None:
    """Subsampling (q = 0.1) only helps: the curve lies between the full-batch Gaussian curve of the same σ and
    steps and the identity, strictly inside somewhere; it is non-increasing, like every trade-off function."""
    sigma, q, steps = 1.0, 0.1, 100
    f = dpsgd_tradeoff(ALPHA, sigma, q, steps)
    full = gaussian_tradeoff(ALPHA, dpsgd_mu(sigma, steps))
    assert np.all(f >= full - 1e-9)
    assert np.all(f <= 1.0 - ALPHA + 1e-9)
    assert np.max(f - full) > 0.5  # full batch (μ = 10) is nearly perfectly distinguishable; q = 0.1 is not
    assert np.max(1.0 - ALPHA - f) > 0.01  # nor is it the identity
    assert np.all(np.diff(f) <= 1e-12)


@pytest.mark.slow
@pytest.mark.parametrize(("sigma", "q", "steps", "relation"), [
    (1.0, 0.1, 100, "add_remove"),
    (4.22, 0.32, 400, "replace_one"),  # the example: replace-one ε ≈ 16.8 at δ = 1e-5
    (2.0, 1.0, 4, "replace_one"),
])
@pytest.mark.parametrize("delta", [1e-5, 1e-3])
def test_implied_epsilon_matches_the_accountant(sigma: float, q: float, steps: int, relation: str,
                                                delta: float) -> None:
    """The (ε, δ) the curve implies is the accountant's ε at δ, within the PLD discretisation (relative 1e-3)."""
    eps, deltas = pld_profile(sigma, q, steps, relation)
    f = tradeoff_from_profile(FINE, eps, deltas)
    assert implied_epsilon(FINE, f, delta) == pytest.approx(
        epsilon_under(sigma, q, steps, delta, relation=relation), rel=1e-3)


def test_degenerate_mechanisms() -> None:
    np.testing.assert_array_equal(dpsgd_tradeoff(ALPHA, 0.0, 0.5, 10), 0.0)  # no noise: perfect tests exist
    np.testing.assert_allclose(dpsgd_tradeoff(ALPHA, 1.0, 0.5, 0), 1.0 - ALPHA)  # nothing released
    with pytest.raises(ValueError):
        pld_profile(1.0, 0.0, 10)


def test_claim_tradeoff_add_remove_full_batch() -> None:
    claim = {"epsilon": 4.3772, "delta": 1e-5, "noise_multiplier": 2.0, "sample_rate": 1.0, "steps": 4}
    t = claim_tradeoff(claim, "add_remove")
    assert t.mu == pytest.approx(1.0)
    assert (t.epsilon, t.delta) == (4.3772, 1e-5)  # add/remove: the claim as recorded
    fpr = np.array([1e-3, 0.01, 0.05, 0.5])
    np.testing.assert_allclose(t.tpr_bound(fpr), 1.0 - norm.cdf(norm.isf(fpr) - 1.0))
    np.testing.assert_allclose(t.eps_delta_tpr_bound(fpr),
                               np.minimum(np.minimum(math.exp(4.3772) * fpr + 1e-5,
                                                     1 - math.exp(-4.3772) * (1 - 1e-5 - fpr)), 1.0))
    # the mechanism's curve lies inside the (ε, δ) region of its own ε
    assert np.all(t.tpr_bound(ALPHA) <= t.eps_delta_tpr_bound(ALPHA) + 1e-6)
    assert "μ = 1" in t.how


@pytest.mark.slow
def test_claim_tradeoff_replace_one_subsampled() -> None:
    claim = {"epsilon": 7.34, "delta": 1e-5, "noise_multiplier": 4.22, "sample_rate": 0.32, "steps": 400}
    t = claim_tradeoff(claim, "replace_one")
    assert t.mu is None and t.mechanism == (4.22, 0.32, 400)
    assert t.epsilon == pytest.approx(replace_one_claim(claim).epsilon)  # ≈ 16.8, not the claimed 7.34
    assert t.epsilon == pytest.approx(16.79, abs=0.01)
    eps, deltas = pld_profile(4.22, 0.32, 400, "replace_one")
    np.testing.assert_allclose(t.tpr_bound(ALPHA), 1.0 - tradeoff_from_profile(ALPHA, eps, deltas))
    # replace-one admits more than add/remove everywhere
    assert np.all(t.tpr_bound(ALPHA) >= claim_tradeoff(claim, "add_remove").tpr_bound(ALPHA) - 1e-9)
    assert "PLD" in t.how and "replace-one" in t.how


def test_claim_tradeoff_without_mechanism_draws_only_the_region() -> None:
    t = claim_tradeoff({"epsilon": 1.0, "delta": 0.0}, "replace_one")
    assert t.mechanism is None and t.f(ALPHA) is None and t.tpr_bound(ALPHA) is None
    assert t.epsilon == pytest.approx(2.0)  # group privacy under replace-one
    np.testing.assert_allclose(t.eps_delta_tpr_bound(0.01), min(math.exp(2.0) * 0.01, 1.0))


@pytest.mark.parametrize("bad", [{"sample_rate": 0.0}, {"sample_rate": 1.5}, {"steps": -1},
                                 {"noise_multiplier": -1.0}, {"noise_multiplier": float("nan")}])
def test_a_claim_with_impossible_mechanism_parameters_keeps_only_its_region(bad: dict) -> None:
    claim = {"epsilon": 2.0, "delta": 1e-5, "noise_multiplier": 1.0, "sample_rate": 0.1, "steps": 10} | bad
    t = claim_tradeoff(claim, "add_remove")
    assert t.mechanism is None and t.tpr_bound(ALPHA) is None
    assert "out of range" in t.how
    np.testing.assert_allclose(t.eps_delta_tpr_bound(ALPHA), 1 - eps_delta_tradeoff(ALPHA, 2.0, 1e-5))
    r = claim_tradeoff(claim, "replace_one")  # group privacy, not a PLD of parameters that cannot run
    assert r.mechanism is None and r.epsilon == pytest.approx(4.0)
