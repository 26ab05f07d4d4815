"""A claim restated for the neighbouring relation an experiment plays: the ε to test is the one of that relation.

A game in which exactly one record of a member/non-member pair trains compares two datasets that differ by a
*swap* (replace-one), not by adding or removing a record; the claim to test is the replace-one ε. For DP-SGD it
comes from dp_accounting's PLD accountant with ``NeighboringRelation.REPLACE_ONE``
(``arena.privacy.accounting.epsilon_under``); for a bare (ε, δ) claim under add/remove, group privacy over
remove-then-add gives (2ε, (1 + e^ε)·δ) under replace-one. Both are proved (an accountant's bound, group privacy).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from arena.privacy.accounting import Relation, epsilon_under

VACUOUS = 1.0
"""A δ of 1: the (ε, δ) inequality holds for every mechanism, so no experiment can refute the claim."""


def group_replace_one(epsilon: float, delta: float) -> tuple[float, float]:
    """(ε, δ) under add/remove ⇒ (2ε, (1 + e^ε)·δ) under replace-one (group privacy: remove x, then add x').

    P[M(D) ∈ S] ≤ e^ε·P[M(D∖x) ∈ S] + δ ≤ e^ε·(e^ε·P[M(D∖x ∪ x') ∈ S] + δ) + δ. For pure ε-DP: 2ε. The δ is
    capped at 1 (``VACUOUS``): a large ε with δ > 0 restates to a claim that allows anything."""
    return 2.0 * epsilon, min(VACUOUS, (1.0 + math.exp(min(epsilon, 700.0))) * delta) if delta else 0.0


@dataclass(frozen=True)
class RelationClaim:
    """A claim restated for the relation an experiment plays: the (ε, δ) to test and how it was obtained."""

    epsilon: float
    delta: float
    relation: Relation
    how: str


def replace_one_claim(claim: Mapping[str, Any]) -> RelationClaim:
    """The replace-one (ε, δ) of a recorded claim (a dict with epsilon, delta and, for DP-SGD, noise_multiplier,
    sample_rate, steps). DP-SGD: the PLD accountant under replace-one at the claimed δ. Otherwise (a bare add/remove
    claim, e.g. output perturbation's pure ε-DP): group privacy, (2ε, (1 + e^ε)·δ)."""
    eps, delta = float(claim["epsilon"]), float(claim["delta"])
    sigma, q, steps = claim.get("noise_multiplier"), claim.get("sample_rate"), claim.get("steps")
    if sigma is not None and q is not None and steps is not None and 0 < delta < 1:
        r = epsilon_under(float(sigma), float(q), int(steps), delta, relation="replace_one", accountant="pld")
        return RelationClaim(r, delta, "replace_one", f"dp_accounting PLD, replace-one (σ = {float(sigma):.4g}, "
                                                      f"q = {float(q):.4g}, {int(steps)} steps)")
    r_eps, r_delta = group_replace_one(eps, delta)
    return RelationClaim(r_eps, r_delta, "replace_one", "group privacy: (2ε, (1 + e^ε)δ)")
