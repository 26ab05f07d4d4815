"""The DP audit: does a defense leak more than its (ε, δ) claim allows, in the experiment actually played?

For a membership matchup the two worlds of a challenge point differ by a *swap*: exactly one record of each
member/non-member pair trains. The claim to test is therefore the claim's replace-one (ε, δ)
(``arena.auditing.replace_one_claim``): dp_accounting's PLD accountant under replace-one for DP-SGD (σ = 4.22,
q = 0.32, 400 steps: 16.8 where add/remove RDP says 7.9), group privacy (2ε, (1 + e^ε)δ) for any other claim
(output perturbation's pure ε-DP: 2ε). The bounds shown beside the measurements (advantage, TPR at each FPR) are
those of that replace-one claim: TPR ≤ e^ε·FPR + δ, advantage ≤ (e^ε − 1)/(e^ε + 1) + δ.

The empirical ε is the held-out Clopper–Pearson bound of ``arena.auditing.heldout_epsilon``: the threshold (and
side) is chosen on a seeded half of the members and of the non-members, and on the other half, with one-sided
95% Clopper–Pearson bounds (2.5% each), ε ≥ max(log((TPR_lo − δ)/FPR_hi), log((1 − FPR_hi − δ)/(1 − TPR_lo))).
A violation is that bound above the replace-one ε: a test at level 5% (simulated in tests/test_auditing.py).
Each audit also carries ``max_certifiable``: the largest bound its evaluation half could ever give (100 + 100
points → 50 + 50 evaluate → at most 2.57), so a reader sees when an audit cannot speak. Caveat, stated where
the numbers are shown: the points are scored on one model, so they are not independent trials; when the saved
arrays carry each point's ``pair`` id, the one-run bound of Steinke, Nasr & Jagielski 2023 (valid for one run)
is computed beside it.

For a reconstruction matchup, Balle et al.'s bound allows a success probability of at most e^ε·κ + δ, where κ
is the prior's mass within the success radius (exact, 1/n, under the game's discrete prior; a lower estimate of
the supremum under the continuous one). Beside it stands the tighter valid bound of
``arena.reconstruction_bounds``: Hayes, Mahloujifar & Balle 2023 for a DP-SGD claim that records σ, q and T
(Φ(Φ⁻¹(κ) + √T/σ) at full batch, the subsampled Gaussian's trade-off curve from dp_accounting's PLD otherwise),
the (ε, δ) trade-off bound 1 − f_{ε,δ}(κ) for any other claim. "Above the bound" is a one-sided Clopper–Pearson
test at level 2.5% of "success probability ≤ the tighter bound" on the success count (each released model is
one independent trial); with an estimated κ it holds for that estimate.

Everything here is a pure function of result rows and the attack's saved scores.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import beta

from arena.auditing import (
    ALPHA,
    HeldOutBound,
    OneRunBound,
    RelationClaim,
    heldout_epsilon,
    one_run_epsilon,
    paired_canaries,
    replace_one_claim,
)
from arena.metrics import FPR_LEVELS, tpr_key
from arena.store import RunStore

CONFIDENCE = 1 - ALPHA  # 95%


def advantage_bound(epsilon: float, delta: float) -> float:
    """The largest membership advantage (TPR − FPR) an (ε, δ)-DP release allows: (e^ε − 1)/(e^ε + 1) + δ."""
    return min(1.0, math.tanh(epsilon / 2) + delta)


def _scaled(epsilon: float, p: float, delta: float) -> float:
    """min(1, e^ε·p + δ) without overflow for large ε (e^700·p > 1 for any positive double p)."""
    if p <= 0.0:
        return min(1.0, delta)
    return min(1.0, math.exp(min(epsilon, 700.0)) * p + delta)


def tpr_bound(epsilon: float, delta: float, fpr: float) -> float:
    """The largest TPR an (ε, δ)-DP release allows at false-positive rate ``fpr``: e^ε·FPR + δ (at most 1)."""
    return _scaled(epsilon, fpr, delta)


def reconstruction_bound(epsilon: float, delta: float, kappa: float) -> float:
    """The largest reconstruction success probability an (ε, δ)-DP release allows: e^ε·κ + δ (at most 1)."""
    return _scaled(epsilon, kappa, delta)


def clopper_pearson(k: np.ndarray | int, n: int, confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided exact (Clopper–Pearson) interval for a binomial proportion, k successes of n; vectorised over k.

    The same interval as ``scipy.stats.binomtest(k, n).proportion_ci(confidence, method="exact")``.
    """
    k = np.asarray(k, dtype=np.float64)
    alpha = 1.0 - confidence
    with np.errstate(invalid="ignore"):
        low = np.where(k > 0, beta.ppf(alpha / 2, k, n - k + 1), 0.0)
        high = np.where(k < n, beta.ppf(1 - alpha / 2, k + 1, n - k), 1.0)
    return low, high


@dataclass(frozen=True)
class EpsilonLowerBound:
    """The held-out ε lower bound of one attack's scores (``arena.auditing.heldout_epsilon``), in the game's words.

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


def split_seed(key: str) -> int:
    """The seed of a matchup's selection/evaluation split: fixed by its key, independent of its scores."""
    return zlib.crc32(key.encode("utf-8"))


def empirical_epsilon(scores: np.ndarray, is_member: np.ndarray, delta: float, alpha: float = ALPHA,
                      seed: int = 0) -> EpsilonLowerBound:
    """The held-out Clopper–Pearson ε lower bound of ``scores`` (either side may mean member) at confidence
    1 − α; replaces the old best-of-all-thresholds bound, whose flag fired above its nominal level."""
    return EpsilonLowerBound.of(heldout_epsilon(scores, is_member, delta, alpha, seed))


@dataclass(frozen=True)
class AuditedMatchup:
    """The columns every audit record shares: which matchup, and the (ε, δ) its defense claims."""

    key: str
    track: str
    defense_label: str
    attack: str
    seed: int
    claimed_epsilon: float
    delta: float


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

    @property
    def violation(self) -> bool:
        """The held-out lower bound (95%) exceeds the replace-one ε: a test at level 5%."""
        return self.lower_bound.epsilon > self.relation_epsilon


@dataclass(frozen=True)
class ReconstructionAudit(AuditedMatchup):
    """One reconstruction matchup against a claimed (ε, δ): the measured success rate beside two bounds on it.

    ``allowed`` is Balle et al.'s e^ε·κ + δ; ``bound`` the tighter valid bound (never above ``allowed``) and
    ``bound_how`` which one it is. ``success_low`` is the one-sided 97.5% Clopper–Pearson lower end of the success
    rate (the two-sided 95% interval's low end).
    """

    kappa: float
    kappa_exact: bool
    success_rate: float
    n_targets: int
    allowed: float
    bound: float
    bound_how: str
    success_low: float

    @property
    def exceeds(self) -> bool:
        """One-sided test at level 2.5%: even the low end of the success rate is above the tighter bound."""
        return self.success_low > self.bound


ArrayLoader = Callable[[str], Mapping[str, Any] | None]


def _claimed(row: dict[str, Any]) -> tuple[float, float]:
    """The (ε, δ) a row's defense achieved and claims."""
    return float(row["claim"]["epsilon"]), float(row["claim"]["delta"])


def _identity(row: dict[str, Any]) -> dict[str, Any]:
    """The columns that name a matchup in every audit record."""
    return {"key": row["key"], "track": row["track"], "defense_label": row["defense_label"],
            "attack": row["attack_label"], "seed": row["seed"]}


def audit_membership(row: dict[str, Any], arrays: Mapping[str, Any]) -> MembershipAudit:
    """Audit one ok membership row whose defense claims (ε, δ), from its saved scores and is_member arrays (and,
    when saved, ``pair``: the id of each point's member/non-member pair, for the one-run bound)."""
    eps, delta = _claimed(row)
    rel: RelationClaim = replace_one_claim(row["claim"])
    metrics = row.get("metrics") or {}
    scores = np.asarray(arrays["scores"], dtype=np.float64).reshape(-1)
    is_member = np.asarray(arrays["is_member"]).astype(bool).reshape(-1)
    tprs = tuple((level, metrics.get(tpr_key(level)), tpr_bound(rel.epsilon, rel.delta, level)) for level in FPR_LEVELS)
    one_run = None
    if "pair" in arrays:
        diff, first_in = paired_canaries(scores, is_member, np.asarray(arrays["pair"]))
        one_run = one_run_epsilon(diff, first_in, ALPHA, rel.delta, seed=split_seed(row["key"]))
    return MembershipAudit(
        **_identity(row),
        claimed_epsilon=eps,
        delta=delta,
        advantage=metrics.get("advantage"),
        advantage_bound=advantage_bound(rel.epsilon, rel.delta),
        tpr_at_fpr=tprs,
        lower_bound=empirical_epsilon(scores, is_member, rel.delta, ALPHA, split_seed(row["key"])),
        relation_epsilon=rel.epsilon,
        relation_delta=rel.delta,
        relation=rel.relation,
        relation_how=rel.how,
        one_run=one_run,
    )


def reconstruction_bounds(claim: Mapping[str, Any], kappa: float) -> tuple[float, float, str]:
    """(e^ε·κ + δ, the tighter valid bound, how the latter was computed) for a claim (a result row's ``claim``).

    A claim that records a Gaussian mechanism's noise multiplier, sampling rate and steps (DP-SGD) gets Hayes et
    al.'s bound for it; any other claim the (ε, δ) trade-off bound. The tighter is the smaller of the valid ones.
    """
    from arena.reconstruction_bounds import dpsgd_bound, tradeoff_dp_bound

    eps, delta = float(claim["epsilon"]), float(claim["delta"])
    allowed = reconstruction_bound(eps, delta, kappa)
    best, how = tradeoff_dp_bound(eps, delta, kappa), "(ε, δ)-DP trade-off: 1 − f_{ε,δ}(κ)"
    sigma, q, steps = claim.get("noise_multiplier"), claim.get("sample_rate"), claim.get("steps")
    if sigma and q and steps:
        gaussian, gaussian_how = dpsgd_bound(kappa, float(sigma), float(q), int(steps))
        if gaussian < best:
            best, how = gaussian, gaussian_how
    return allowed, min(best, allowed), how


def audit_reconstruction(row: dict[str, Any]) -> ReconstructionAudit | None:
    """Audit one ok reconstruction row whose defense claims (ε, δ); None when the game reported no κ."""
    metrics = row.get("metrics") or {}
    if metrics.get("kappa") is None or metrics.get("success_rate") is None or not metrics.get("n_targets"):
        return None
    eps, delta = _claimed(row)
    n = int(metrics["n_targets"])
    rate = float(metrics["success_rate"])
    kappa = float(metrics["kappa"])
    low, _ = clopper_pearson(round(rate * n), n, 0.95)  # two-sided 95% low end = one-sided 97.5%
    allowed, bound, how = reconstruction_bounds(row["claim"], kappa)
    return ReconstructionAudit(
        **_identity(row),
        claimed_epsilon=eps,
        delta=delta,
        kappa=kappa,
        kappa_exact=bool(metrics.get("kappa_exact", False)),
        success_rate=rate,
        n_targets=n,
        allowed=allowed,
        bound=bound,
        bound_how=how,
        success_low=float(low),
    )


def describe_reconstruction(a: ReconstructionAudit) -> str:
    """One line per audited reconstruction matchup: measured success beside both bounds, κ, the verdict."""
    kappa = f"κ = {a.kappa:.4g} " + ("(exact)" if a.kappa_exact else "(estimated: a lower estimate of the supremum)")
    verdict = ("ABOVE THE BOUND (one-sided Clopper–Pearson, level 2.5%)" if a.exceeds else
               "within the bound")
    return (
        f"{a.defense_label} vs {a.attack} seed {a.seed}: success {a.success_rate:.3f} of {a.n_targets} "
        f"(low end {a.success_low:.3f}); {kappa}; e^ε·κ + δ = {a.allowed:.3f}; tighter bound {a.bound:.3f} "
        f"[{a.bound_how}]: {verdict}"
    )


@dataclass(frozen=True)
class Audit:
    """Every auditable matchup of a run."""

    membership: tuple[MembershipAudit, ...]
    reconstruction: tuple[ReconstructionAudit, ...]
    missing_arrays: tuple[str, ...]  # keys of claiming membership matchups whose scores were not found

    @property
    def violations(self) -> tuple[MembershipAudit, ...]:
        return tuple(a for a in self.membership if a.violation)

    def violation_keys(self) -> frozenset[str]:
        return frozenset(a.key for a in self.violations)


def _claims(row: dict[str, Any]) -> bool:
    claim = row.get("claim") or {}
    return row.get("status") == "ok" and claim.get("epsilon") is not None and claim.get("delta") is not None


def audit_rows(rows: list[dict[str, Any]], arrays: ArrayLoader) -> Audit:
    """Audit every ok matchup whose defense claims (ε, δ); ``arrays(key)`` returns a matchup's saved arrays."""
    membership, reconstruction, missing = [], [], []
    for row in rows:
        if not _claims(row):
            continue
        if row["game"] == "membership":
            saved = arrays(row["key"])
            if saved is None or "scores" not in saved or "is_member" not in saved:
                missing.append(row["key"])
                continue
            membership.append(audit_membership(row, saved))
        elif row["game"] == "reconstruction":
            found = audit_reconstruction(row)
            if found is not None:
                reconstruction.append(found)
    return Audit(tuple(membership), tuple(reconstruction), tuple(missing))


def saved_arrays(store: RunStore) -> ArrayLoader:
    """The loader of a run directory's per-matchup arrays (as numpy), None for a matchup that saved none."""

    def load(key: str) -> Mapping[str, Any] | None:
        saved = store.load_arrays(key)
        return None if saved is None else {k: v.numpy() for k, v in saved.items()}

    return load


def audit_store(store: RunStore, rows: list[dict[str, Any]]) -> Audit:
    """Audit ``rows`` of a run directory, reading scores from its artifact cache."""
    return audit_rows(rows, saved_arrays(store))


def violation_findings(audit: Audit) -> dict[str, str]:
    """Matchup key → a one-line finding for each violation (for the leaderboard and the run summary)."""
    return {a.key: describe_violation(a) for a in audit.violations}


def describe_violation(a: MembershipAudit) -> str:
    """The finding in one line: the bound, the claim for the relation played, and the counts it rests on."""
    lb = a.lower_bound
    return (
        f"empirical ε ≥ {lb.epsilon:.3f} > replace-one ε = {a.relation_epsilon:.3f} of the claimed "
        f"ε = {a.claimed_epsilon:.3f}, δ = {a.delta:g} ({a.relation_how}); 95% Clopper–Pearson on the held-out "
        f"half: {lb.true_positives}/{lb.n_members} members and {lb.false_positives}/{lb.n_nonmembers} non-members "
        f"flagged by the threshold chosen on the other half (at most {lb.max_certifiable:.3f} certifiable)"
    )


def describe_audit(a: MembershipAudit) -> str:
    """One line per audited membership matchup: the bound, what its sample size could certify, the verdict."""
    lb = a.lower_bound
    one = (f"; one-run ε ≥ {a.one_run.epsilon:.3f} ({a.one_run.correct}/{a.one_run.guesses} pairs guessed)"
           if a.one_run is not None else "")
    return (
        f"{a.defense_label} vs {a.attack} seed {a.seed}: empirical ε ≥ {lb.epsilon:.3f} (95%, held-out "
        f"{lb.n_members} + {lb.n_nonmembers}; at most {lb.max_certifiable:.3f} certifiable) vs replace-one "
        f"ε = {a.relation_epsilon:.3f} (claimed {a.claimed_epsilon:.3f} add/remove){one}: "
        + ("VIOLATION" if a.violation else
           "consistent" if lb.max_certifiable > a.relation_epsilon else "consistent (cannot refute: claim above max)")
    )


def audit_lines(audit: Audit) -> list[str]:
    """``describe_audit`` for every membership matchup, violations first."""
    return [describe_audit(a) for a in sorted(audit.membership, key=lambda a: not a.violation)]
