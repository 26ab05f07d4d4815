"""arena.privacy.gdp: μ ↔ (ε, δ) against dp_accounting, the Gaussian-DP estimate (a lower confidence bound on μ
when the trade-off is Gaussian) and the Gaussian-fit bound by hand (see tests.privacy.simulate for the Monte-Carlo
tolerances)."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from scipy.stats import norm

from arena.privacy.binomial import cp_lower, cp_upper
from arena.privacy.gdp import (
    gaussian_bound,
    gaussian_mu_batch,
    gdp_delta,
    gdp_epsilon,
    gdp_estimate,
    gdp_mu,
    gdp_mu_lower,
)
from tests.privacy.simulate import ALPHA, DELTA, mc_tolerance


def test_gdp_conversion_matches_dp_accounting_and_inverts() -> None:
    for mu in (0.5, 1.0, 2.0):
        assert gdp_epsilon(mu, DELTA) == pytest.approx(dp_accounting.get_epsilon_gaussian(1 / mu, DELTA), rel=1e-8)
        assert gdp_delta(mu, gdp_epsilon(mu, DELTA)) == pytest.approx(DELTA, rel=1e-6)
    assert gdp_mu(gdp_epsilon(1.3, DELTA), DELTA) == pytest.approx(1.3, rel=1e-6)
    assert gdp_epsilon(0.0, DELTA) == 0.0


@pytest.mark.slow
def test_gdp_mu_lower_hand_formula_and_estimate() -> None:
    # 900/1000 positives and 100/1000 negatives flagged: μ_lo = Φ⁻¹(1 − FPR_hi) − Φ⁻¹(1 − TPR_lo).
    fpr_hi = float(cp_upper(100, 1000, 0.025))
    tpr_lo = float(cp_lower(900, 1000, 0.025))
    assert float(gdp_mu_lower(900, 1000, 100, 1000)) == pytest.approx(norm.isf(fpr_hi) - norm.ppf(1 - tpr_lo))
    rng = np.random.default_rng(17)
    R, n, mu = 100, 1000, 1.0
    truth = np.array([1] * n + [0] * n)
    ests = [gdp_estimate(rng.normal(size=2 * n) + mu * truth, truth, DELTA, seed=i) for i in range(R)]
    mus = np.array([e.mu_lo for e in ests])
    eps = np.array([e.epsilon for e in ests])
    claimed = gdp_epsilon(mu, DELTA)
    print(f"\nGaussian-DP estimate at μ = {mu} (ε = {claimed:.2f}), {n} + {n}: median μ_lo {np.median(mus):.2f}, "
          f"median ε {np.median(eps):.2f}, above the truth in {np.mean(eps > claimed):.2f}")
    assert np.mean(mus > mu) <= ALPHA + mc_tolerance(ALPHA, R)  # a lower confidence bound on μ
    assert np.median(eps) > 0.4 * claimed  # and it has power where Clopper–Pearson at δ = 1e-5 has none


def test_gaussian_bound_hand_computed_cohens_d_and_its_epsilon() -> None:
    """In [1, 2, 3], out [0, 1, 2]: μ̂ = 1 (means 2 and 1, pooled s = 1), se = √(6/9 + 1/12) = √0.75."""
    s, t = np.array([1.0, 2, 3, 0, 1, 2]), np.array([1, 1, 1, 0, 0, 0], bool)
    b = gaussian_bound(s, t, 1e-5, alpha=0.05)
    assert b.mu_hat == pytest.approx(1.0) and b.se == pytest.approx(math.sqrt(0.75))
    assert b.mu_lo == pytest.approx(1.0 - 1.6448536 * math.sqrt(0.75)) and b.epsilon == 0.0  # no evidence
    big = np.random.default_rng(0)
    truth = big.random(50_000) < 0.5
    scores = big.normal(size=50_000) + 1.0 * truth
    b = gaussian_bound(scores, truth, 1e-5, alpha=0.05)
    assert abs(b.mu_hat - 1.0) < 4 * b.se and b.epsilon == pytest.approx(gdp_epsilon(b.mu_lo, 1e-5))
    mu, se = gaussian_mu_batch(np.stack([scores, -scores]), truth)
    assert mu[0] == pytest.approx(b.mu_hat) and mu[1] == pytest.approx(-b.mu_hat) and se[0] == pytest.approx(b.se)


def test_the_normal_quantiles_are_scipy_stats_norms_bit_for_bit() -> None:
    # gdp, sigma_fit and tradeoff use scipy.special's ndtri/ndtr/log_ndtr (scipy.stats takes 0.8 s to import)
    from scipy.special import log_ndtr, ndtr, ndtri

    p = np.concatenate([np.logspace(-300, -1, 500), np.linspace(0.01, 0.99, 99), 1 - np.logspace(-16, -2, 100)])
    x = np.linspace(-40.0, 40.0, 801)
    assert np.array_equal(norm.isf(p), -ndtri(p)) and np.array_equal(norm.ppf(p), ndtri(p))
    assert np.array_equal(norm.cdf(x), ndtr(x)) and np.array_equal(norm.logcdf(x), log_ndtr(x))
