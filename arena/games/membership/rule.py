"""The membership game's audit rule: does a defense leak more than its (ε, δ) claim allows, in the experiment
actually played?

The two worlds of a challenge point differ by a *swap*: exactly one record of each member/non-member pair trains.
The claim to test is therefore the claim's replace-one (ε, δ) (``arena.privacy.relations.replace_one_claim``):
dp_accounting's PLD accountant under replace-one for DP-SGD (σ = 4.22, q = 0.32, 400 steps: 16.8 where
add/remove RDP says 7.9), group privacy (2ε, (1 + e^ε)δ) for any other claim (output perturbation's pure ε-DP:
2ε). The bounds shown beside the measurements (advantage, TPR at each FPR) are those of that replace-one claim:
TPR ≤ e^ε·FPR + δ, advantage ≤ (e^ε − 1)/(e^ε + 1) + δ.

The empirical ε is the held-out Clopper–Pearson bound of ``arena.privacy.heldout.heldout_epsilon``: the threshold (and
side) is chosen on a seeded half of the members and of the non-members, and on the other half, with one-sided
95% Clopper–Pearson bounds (2.5% each), ε ≥ max(log((TPR_lo − δ)/FPR_hi), log((1 − FPR_hi − δ)/(1 − TPR_lo))).
A violation is that bound above the replace-one ε: a test at level 5% (simulated in tests/privacy/test_heldout.py).
Each audit also carries ``max_certifiable``: the largest bound its evaluation half could ever give (100 + 100
points → 50 + 50 evaluate → at most 2.57), so a reader sees when an audit cannot speak. Caveat, stated where
the numbers are shown: the points are scored on one model, so they are not independent trials.

The game saves each challenge point's ``pair`` (member i and non-member i were dealt from one pair, so which of
them trained is a fair coin, independent across pairs; −1 for a pair whose labels differ, dropped). Then the
paired one-run bound of Steinke, Nasr & Jagielski 2023 (``paired_canaries``: each pair scored by the difference
of its two scores), proved for the dependent points of one model, joins the verdict: the held-out and the
one-run bound each at α/2 (Bonferroni), a violation iff either exceeds the replace-one ε. Every audit says how
many pairs a refutation of its claim needs at the least (``arena.games.membership.power``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from arena.contracts.metric import FPR_LEVELS, tpr_key
from arena.games.membership.power import MAX_PAIRS, pairs_to_refute
from arena.privacy.binomial import ALPHA
from arena.privacy.heldout import HeldOutBound, heldout_epsilon
from arena.privacy.one_run import OneRunBound, one_run_epsilon, paired_canaries
from arena.privacy.relations import VACUOUS, RelationClaim, replace_one_claim
from arena.results.audit import ArrayLoader, AuditedMatchup, GameAudit, claimed, identity, scaled, split_seed


def advantage_bound(epsilon: float, delta: float) -> float:
    """The largest membership advantage (TPR − FPR) an (ε, δ)-DP release allows: (e^ε − 1)/(e^ε + 1) + δ."""
    return min(1.0, math.tanh(epsilon / 2) + delta)


def tpr_bound(epsilon: float, delta: float, fpr: float) -> float:
    """The largest TPR an (ε, δ)-DP release allows at false-positive rate ``fpr``: e^ε·FPR + δ (at most 1)."""
    return scaled(epsilon, fpr, delta)


@dataclass(frozen=True)
class EpsilonLowerBound:
    """The held-out ε lower bound of one attack's scores (``arena.privacy.heldout.heldout_epsilon``),
    in the game's words.

    The counts are those of the evaluation half, where the bound is computed; the threshold was chosen on the
    other half (``n_members_total`` and ``n_nonmembers_total`` count both)."""

    epsilon: float  # 0.0 when the test shows nothing
    n_members: int  # evaluation half
    n_nonmembers: int
    true_positives: int  # members / non-members flagged on the evaluation half
    false_positives: int
    direction: str  # "higher" (a high score means member), "lower", or "" when no evidence
    max_certifiable: float  # the largest bound n_members + n_nonmembers could ever give
    n_members_total: int = 0
    n_nonmembers_total: int = 0
    alpha: float = ALPHA
    delta: float = 0.0

    @classmethod
    def of(cls, b: HeldOutBound) -> EpsilonLowerBound:
        return cls(b.epsilon, b.n_pos, b.n_neg, b.true_positives, b.false_positives, b.direction,
                   b.max_certifiable, b.n_pos_total, b.n_neg_total, b.alpha, b.delta)


def empirical_epsilon(scores: np.ndarray, is_member: np.ndarray, delta: float, alpha: float = ALPHA,
                      seed: int = 0) -> EpsilonLowerBound:
    """The held-out Clopper–Pearson ε lower bound of ``scores`` (either side may mean member) at confidence
    1 − α; replaces the old best-of-all-thresholds bound, whose flag fired above its nominal level."""
    return EpsilonLowerBound.of(heldout_epsilon(scores, is_member, delta, alpha, seed))


@dataclass(frozen=True)
class MembershipAudit(AuditedMatchup):
    """One membership matchup against a claim: the bounds its replace-one (ε, δ) implies and what the attack shows.

    ``claimed_epsilon``/``delta`` are the claim as recorded (add/remove); ``relation_epsilon``/``relation_delta``
    the claim for the swap the game plays, which the bounds and the verdict use."""

    advantage: float | None
    advantage_bound: float
    tpr_at_fpr: tuple[tuple[float, float | None, float], ...]  # (FPR level, measured TPR or None, TPR bound)
    lower_bound: EpsilonLowerBound
    relation_epsilon: float = math.nan
    relation_delta: float = math.nan
    relation: str = "replace_one"
    relation_how: str = ""
    one_run: OneRunBound | None = None  # when the saved arrays pair the points
    pairs_needed: int | None = None
    """The fewest pairs (a power of two) whose one-run bound could exceed the replace-one ε; None: none up to
    ``MAX_PAIRS``."""

    @property
    def violation(self) -> bool:
        """The held-out lower bound or, for paired points, the one-run bound exceeds the replace-one ε (each at
        α/2 when both are computed): a test at level 5%."""
        one_run = self.one_run is not None and self.one_run.epsilon > self.relation_epsilon
        return self.lower_bound.epsilon > self.relation_epsilon or one_run


def audit_membership(row: dict[str, Any], arrays: Mapping[str, Any]) -> MembershipAudit:
    """Audit one ok membership row whose defense claims (ε, δ), from its saved scores and is_member arrays (and,
    when saved, ``pair``: the id of each point's member/non-member pair, for the one-run bound)."""
    eps, delta = claimed(row)
    rel: RelationClaim = replace_one_claim(row["claim"])
    if rel.delta >= VACUOUS:  # nothing to refute: the estimators take δ < 1; just below it they bound ε by 0
        rel = dataclasses.replace(rel, delta=math.nextafter(VACUOUS, 0.0))
    metrics = row.get("metrics") or {}
    scores = np.asarray(arrays["scores"], dtype=np.float64).reshape(-1)
    is_member = np.asarray(arrays["is_member"]).astype(bool).reshape(-1)
    if "target" in arrays:  # the vulnerable-record protocol: the first target alone, one model's experiment
        first = np.asarray(arrays["target"]).reshape(-1) == 0
        scores, is_member = scores[first], is_member[first]
    tprs = tuple((level, metrics.get(tpr_key(level)), tpr_bound(rel.epsilon, rel.delta, level)) for level in FPR_LEVELS)
    one_run, alpha = None, ALPHA
    pair = np.asarray(arrays["pair"]).reshape(-1) if "pair" in arrays else np.zeros(0, np.int64)
    kept = pair >= 0
    if kept.sum() >= 2:  # pairs of one label, the others dropped
        alpha = ALPHA / 2  # two bounds in the verdict
        diff, first_in = paired_canaries(scores[kept], is_member[kept], pair[kept])
        one_run = one_run_epsilon(diff, first_in, alpha, rel.delta, seed=split_seed(row["key"]))
    return MembershipAudit(
        **identity(row),
        claimed_epsilon=eps,
        delta=delta,
        advantage=metrics.get("advantage"),
        advantage_bound=advantage_bound(rel.epsilon, rel.delta),
        tpr_at_fpr=tprs,
        lower_bound=empirical_epsilon(scores, is_member, rel.delta, alpha, split_seed(row["key"])),
        relation_epsilon=rel.epsilon,
        relation_delta=rel.delta,
        relation=rel.relation,
        relation_how=rel.how,
        one_run=one_run,
        pairs_needed=pairs_to_refute(rel.epsilon, rel.delta, ALPHA / 2),
    )


def describe_violation(a: MembershipAudit) -> str:
    """The finding in one line: the bound, the claim for the relation played, and the counts it rests on."""
    lb = a.lower_bound
    if a.one_run is not None and a.one_run.epsilon > a.relation_epsilon and lb.epsilon <= a.relation_epsilon:
        b = a.one_run
        return (f"paired one-run ε ≥ {b.epsilon:.3f} > replace-one ε = {a.relation_epsilon:.3f} of the claimed "
                f"ε = {a.claimed_epsilon:.3f}, δ = {a.delta:g} ({a.relation_how}); {1 - b.alpha:.1%} confidence, "
                f"{b.correct}/{b.guesses} guesses right of {b.m} same-label pairs")
    return (
        f"empirical ε ≥ {lb.epsilon:.3f} > replace-one ε = {a.relation_epsilon:.3f} of the claimed "
        f"ε = {a.claimed_epsilon:.3f}, δ = {a.delta:g} ({a.relation_how}); 95% Clopper–Pearson on the held-out "
        f"half: {lb.true_positives}/{lb.n_members} members and {lb.false_positives}/{lb.n_nonmembers} non-members "
        f"flagged by the threshold chosen on the other half (at most {lb.max_certifiable:.3f} certifiable)"
    )


def describe_audit(a: MembershipAudit) -> str:
    """One line per audited membership matchup: the bound, what its sample size could certify, the verdict."""
    lb = a.lower_bound
    one = (f"; paired one-run ε ≥ {a.one_run.epsilon:.3f} ({a.one_run.correct}/{a.one_run.guesses} right of "
           f"{a.one_run.m} same-label pairs; at most {a.one_run.max_certifiable:.3f} certifiable)"
           if a.one_run is not None else "")
    one += (f"; a refutation needs at least {a.pairs_needed} pairs" if a.pairs_needed is not None
            else f"; no size up to {MAX_PAIRS:,} pairs can refute it")
    return (
        f"{a.defense_label} vs {a.attack} seed {a.seed}: empirical ε ≥ {lb.epsilon:.3f} (95%, held-out "
        f"{lb.n_members} + {lb.n_nonmembers}; at most {lb.max_certifiable:.3f} certifiable) vs replace-one "
        f"ε = {a.relation_epsilon:.3f} (claimed {a.claimed_epsilon:.3f} add/remove){one}: "
        + ("VIOLATION" if a.violation else
           "consistent" if max(lb.max_certifiable, a.one_run.max_certifiable if a.one_run else 0.0) >
           a.relation_epsilon else "consistent (cannot refute: claim above max)")
    )


def audit_game(rows: Sequence[Mapping[str, Any]], arrays: ArrayLoader) -> GameAudit:
    """Audit every claiming membership row from its saved scores; rows whose scores are missing are listed."""
    records, missing = [], []
    for row in rows:
        saved = arrays(row["key"])
        if saved is None or "scores" not in saved or "is_member" not in saved:
            missing.append(row["key"])
            continue
        records.append(audit_membership(dict(row), saved))
    violations = tuple(a for a in records if a.violation)
    return GameAudit(
        game="membership",
        records=tuple(records),
        violations=violations,
        findings={a.key: describe_violation(a) for a in violations},
        lines=tuple(describe_audit(a) for a in sorted(records, key=lambda a: not a.violation)),
        missing=tuple(missing),
        tested=len(records),
    )
