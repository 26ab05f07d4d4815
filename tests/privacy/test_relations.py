"""arena.privacy.relations: a claim restated for replace-one, by the PLD accountant or by group privacy."""

from __future__ import annotations

import math

import pytest

from arena.privacy.relations import group_replace_one, replace_one_claim
from tests.privacy.simulate import DELTA


def test_replace_one_claim_from_accountant_or_group_privacy() -> None:
    claim = {"epsilon": 7.93, "delta": DELTA, "noise_multiplier": 4.22, "sample_rate": 0.32, "steps": 400}
    r = replace_one_claim(claim)
    assert r.epsilon == pytest.approx(16.79, abs=0.01) and r.delta == DELTA and "PLD" in r.how
    pure = replace_one_claim({"epsilon": 1.5, "delta": 0.0})  # output perturbation's pure ε-DP
    assert (pure.epsilon, pure.delta) == (3.0, 0.0)
    bare = replace_one_claim({"epsilon": 1.0, "delta": DELTA})
    assert bare.epsilon == 2.0 and bare.delta == pytest.approx((1 + math.e) * DELTA)
    assert (bare.epsilon, bare.delta) == group_replace_one(1.0, DELTA)


def test_a_bare_claim_of_large_epsilon_restates_to_a_vacuous_delta_and_audits_as_no_violation() -> None:
    """ε = 1000 with δ = 1e-5 and no DP-SGD parameters: group privacy's (1 + e^ε)·δ is capped at 1 (a claim that
    allows anything), and the membership audit of even a perfect attack finds no violation instead of failing on
    a δ above 1."""
    import numpy as np

    from arena.games.membership.rule import audit_membership
    from arena.privacy.relations import VACUOUS, group_replace_one, replace_one_claim

    assert group_replace_one(1000.0, 1e-5) == (2000.0, VACUOUS)
    assert group_replace_one(1.0, 1e-5) == (2.0, (1 + np.e) * 1e-5)
    claim = {"epsilon": 1000.0, "delta": 1e-5, "accountant": "rdp"}
    assert replace_one_claim(claim).delta == VACUOUS
    row = {"claim": claim, "metrics": {}, "key": "k", "track": "t", "defense": "d", "defense_label": "d",
           "attack": "a", "attack_label": "a", "seed": 0, "scenario": "s", "epsilon": 1000.0, "delta": 1e-5}
    perfect = {"scores": np.r_[np.ones(100), np.zeros(100)], "is_member": np.r_[np.ones(100), np.zeros(100)] > 0}
    audit = audit_membership(row, perfect)
    assert audit.relation_epsilon == 2000.0 and audit.lower_bound.epsilon == 0.0 and not audit.violation
