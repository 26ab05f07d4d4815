"""The reconstruction audit: measured success beside e^ε·κ + δ and the tighter bound; a one-sided test at 2.5%."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest, norm

from arena.games.reconstruction.rule import audit_reconstruction, describe_reconstruction, reconstruction_bounds


def row(rate: float, n: int, kappa: float, claim: dict, exact: bool | None = True) -> dict:
    metrics = {"success_rate": rate, "n_targets": n, "kappa": kappa}
    if exact is not None:
        metrics["kappa_exact"] = exact
    return {"key": "k", "track": "t", "game": "reconstruction", "defense_label": "d", "attack": "a",
            "attack_label": "a", "seed": 0, "status": "ok", "claim": claim, "metrics": metrics}


def test_full_batch_dpsgd_gets_the_gdp_bound_by_hand() -> None:
    """σ = 5, T = 100 at full batch: μ = 2; κ = Φ(−2) gives Φ(0) = 0.5, where e^ε κ + δ is vacuous at ε = 8."""
    kappa = float(norm.cdf(-2.0))
    claim = {"epsilon": 8.0, "delta": 1e-5, "noise_multiplier": 5.0, "sample_rate": 1.0, "steps": 100}
    allowed, bound, how = reconstruction_bounds(claim, kappa)
    assert allowed == 1.0 and bound == pytest.approx(0.5) and "full batch" in how


def test_pure_dp_claim_gets_the_tradeoff_bound() -> None:
    # ε = 1, δ = 0, κ = 0.5: e/2 is vacuous, 1 − e^{−1}(1 − 0.5) = 0.816 is not
    allowed, bound, how = reconstruction_bounds({"epsilon": 1.0, "delta": 0.0}, 0.5)
    assert allowed == 1.0 and bound == pytest.approx(1 - math.exp(-1) / 2) and "trade-off" in how


def test_flag_is_a_one_sided_clopper_pearson_test_against_the_tighter_bound() -> None:
    claim = {"epsilon": 8.0, "delta": 1e-5, "noise_multiplier": 5.0, "sample_rate": 1.0, "steps": 100}
    kappa = float(norm.cdf(-2.0))  # bound 0.5
    within = audit_reconstruction(row(0.6, 50, kappa, claim))  # 30/50: low end 0.452 < 0.5
    above = audit_reconstruction(row(0.76, 50, kappa, claim))  # 38/50: low end 0.618 > 0.5
    assert within.success_low == pytest.approx(binomtest(30, 50).proportion_ci(0.95, method="exact").low)
    assert not within.exceeds and above.exceeds
    assert above.allowed == 1.0  # e^ε κ + δ alone could never flag it
    line = describe_reconstruction(above)
    assert "(exact)" in line and "ABOVE THE BOUND" in line and "level 2.5%" in line and "0.500" in line
    estimated = audit_reconstruction(row(0.6, 50, kappa, claim, exact=False))
    assert not estimated.kappa_exact and "estimated" in describe_reconstruction(estimated)
    assert audit_reconstruction(row(0.6, 50, kappa, claim, exact=None)).kappa_exact is False  # older rows


@pytest.mark.slow
def test_flag_fires_at_most_at_its_level_for_an_attack_exactly_at_the_bound() -> None:
    """Success counts drawn at the bound itself (ε = 1, δ = 0, κ = 0.1: e × 0.1 = 0.272): flagged ≤ 2.5%."""
    claim = {"epsilon": 1.0, "delta": 0.0}
    _, bound, _ = reconstruction_bounds(claim, 0.1)
    assert bound == pytest.approx(math.e * 0.1)
    counts = np.random.default_rng(0).binomial(50, bound, size=4000)
    flagged = np.mean([audit_reconstruction(row(k / 50, 50, 0.1, claim)).exceeds for k in counts])
    assert flagged <= 0.025 + 3 * math.sqrt(0.025 * 0.975 / 4000)
