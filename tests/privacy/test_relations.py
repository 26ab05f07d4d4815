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
