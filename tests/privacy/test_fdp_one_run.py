"""arena.privacy.fdp_one_run: the f-DP one-run test (Mahloujifar, Melis & Chaudhuri 2025) by hand, its monotonicity
in the curve, and its false-positive rate against the claim's own curve (at most α over 300 experiments) with its
power at 2ε, for Gaussian canaries and for Poisson-subsampled DP-SGD's (see tests.privacy.simulate)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from arena.privacy.accounting import calibrate_noise
from arena.privacy.fdp_one_run import (
    claim_fbar,
    fdp_one_run,
    fdp_rejects,
    gdp_fbar,
    largest_rejected_mu,
    profile_fbar,
)
from arena.privacy.gdp import gdp_mu
from arena.privacy.tradeoff import gaussian_tradeoff
from tests.privacy.simulate import ALPHA, DELTA, mc_tolerance


def test_fdp_test_by_hand_and_monotone_in_the_curve() -> None:
    # A perfectly private mechanism (f̄(x) = x): 20 of 20 right has probability 2^-20, far below 5 %; 6 of 10 is chance.
    assert fdp_rejects(20, 20, 20, 0.05, gdp_fbar(0.0))
    assert not fdp_rejects(10, 10, 6, 0.05, gdp_fbar(0.0))
    # fewer right, or a less private claim, never rejects more
    mu = largest_rejected_mu(1000, 100, 90, 0.05)
    assert 0 < mu < 20
    assert fdp_rejects(1000, 100, 90, 0.05, gdp_fbar(0.99 * mu))
    assert not fdp_rejects(1000, 100, 90, 0.05, gdp_fbar(1.01 * mu))
    assert largest_rejected_mu(1000, 100, 80, 0.05) < mu


def test_tabulated_curve_is_never_above_the_exact_one() -> None:
    """GDP's profile read back through ``profile_fbar`` stays at or below Φ(Φ⁻¹(x) − μ) and close to it."""
    from arena.privacy.gdp import gdp_delta

    mu = 1.5
    eps = np.linspace(0, 12, 3000)
    fbar = profile_fbar(eps, [gdp_delta(mu, e) for e in eps])
    exact = gdp_fbar(mu)
    xs = np.concatenate([np.logspace(-9, -1, 40), np.linspace(0.1, 0.999, 40)])
    got = np.array([fbar(x) for x in xs])
    want = np.array([exact(x) for x in xs])
    assert np.all(got <= want + 1e-12)
    assert np.allclose(got, want, rtol=0.05, atol=1e-9)
    assert float(gaussian_tradeoff(1 - 0.3, mu)) == pytest.approx(exact(0.3))


def _rates(make, claim, R: int, seed: int) -> float:
    return float(np.mean([bool(fdp_one_run(*make(), ALPHA, DELTA, claim=claim, seed=seed + i).claim_refuted)
                          for i in range(R)]))


@pytest.mark.slow
def test_claim_curve_test_is_calibrated_for_gaussian_canaries_with_power_at_twice_epsilon() -> None:
    rng = np.random.default_rng(31)
    R, m, eps = 300, 2000, 2.0
    mu = gdp_mu(eps, DELTA)

    def canaries(true_mu: float):
        def make():
            t = rng.random(m) < 0.5
            return rng.normal(size=m) + true_mu * t, t
        return make

    fpr = _rates(canaries(mu), gdp_fbar(mu), R, 0)
    power = _rates(canaries(gdp_mu(2 * eps, DELTA)), gdp_fbar(mu), 100, 10_000)
    print(f"\nf-DP claim test, Gaussian canaries μ = {mu:.3f} (ε = {eps}), m = {m}: false-positive rate {fpr:.4f} "
          f"(R = {R}, nominal {ALPHA}), power at 2ε {power:.2f}")
    assert fpr <= ALPHA + mc_tolerance(ALPHA, R)
    assert power >= 0.5


@pytest.mark.slow
def test_claim_curve_test_is_calibrated_for_subsampled_dpsgd_with_power_at_twice_epsilon() -> None:
    """Dirac canaries of Poisson-subsampled DP-SGD (q = 0.2, T = 250) at exactly the claimed σ, against the
    claim's PLD curve: at most α of 300 experiments reject it; at the noise of 2ε most do."""
    rng = np.random.default_rng(32)
    q, steps, R, m, eps = 0.2, 250, 300, 2000, 4.0
    sigma, _ = calibrate_noise(eps, q, steps, DELTA, "pld")
    sigma2, _ = calibrate_noise(2 * eps, q, steps, DELTA, "pld")
    claim = claim_fbar(sigma, q, steps)

    def canaries(s: float):
        def make():
            t = rng.random(m) < 0.5
            return rng.binomial(steps, q, size=m) * t + rng.normal(size=m) * math.sqrt(steps) * s, t
        return make

    fpr = _rates(canaries(sigma), claim, R, 0)
    power = _rates(canaries(sigma2), claim, 100, 10_000)
    print(f"\nf-DP claim test, subsampled DP-SGD σ = {sigma:.3f} (ε = {eps}, q = {q}, T = {steps}), m = {m}: "
          f"false-positive rate {fpr:.4f} (R = {R}, nominal {ALPHA}), power at 2ε {power:.2f}")
    assert fpr <= ALPHA + mc_tolerance(ALPHA, R)
    assert power >= 0.5
