"""The gradients audit: the client's claim read by the reconstruction game's rule, on the targets' success."""

from __future__ import annotations

import pytest
from scipy.stats import norm

from arena.games.gradients.rule import audit_game


def row(rate: float, trials: int, kappa: float, claim: dict | None) -> dict:
    return {"key": "k", "track": "t", "game": "gradients", "defense_label": "client-dpsgd ε=1", "attack": "idlg",
            "attack_label": "idlg", "seed": 0, "status": "ok", "claim": claim,
            "metrics": {"target_success_rate": rate, "n_trials": trials, "n_targets": trials, "kappa": kappa,
                        "kappa_exact": False}}


def test_a_one_step_client_dpsgd_claim_gets_hayes_et_al_s_full_batch_bound_by_hand() -> None:
    """σ = 0.5, T = 1, q = 1: μ = 1/σ = 2; κ = Φ(−2) gives Φ(Φ⁻¹(κ) + μ) = Φ(0) = 0.5."""
    kappa = float(norm.cdf(-2.0))
    claim = {"epsilon": 8.0, "delta": 1e-5, "noise_multiplier": 0.5, "sample_rate": 1.0, "steps": 1}
    audit = audit_game([row(0.9, 40, kappa, claim)], lambda key: {})
    (record,) = audit.records
    assert audit.game == "gradients"
    assert record.success_rate == 0.9 and record.n_targets == 40
    assert record.bound == pytest.approx(0.5) and "full batch" in record.bound_how
    assert record.exceeds, "36 of 40 (low end 0.76) is above 0.5: the claim would be broken"


def test_success_within_the_bound_is_not_flagged() -> None:
    kappa = float(norm.cdf(-2.0))
    claim = {"epsilon": 8.0, "delta": 1e-5, "noise_multiplier": 0.5, "sample_rate": 1.0, "steps": 1}
    (record,) = audit_game([row(0.0, 40, kappa, claim)], lambda key: {}).records
    assert not record.exceeds and record.success_low == 0.0
