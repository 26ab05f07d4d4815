"""The DP audit: does a defense leak more than its (ε, δ) claim allows?

For a membership matchup against a defense that claims (ε, δ), the guarantee bounds every attack:
TPR ≤ e^ε·FPR + δ, TNR ≤ e^ε·FNR + δ, hence advantage ≤ (e^ε − 1)/(e^ε + 1) + δ (the tutorial's
"DP-privacy connection"). Turned around, an attack's ROC gives a lower bound on the ε the model actually
spends: at each threshold, with 95% Clopper–Pearson intervals on TPR and FPR taken at their pessimistic ends,

    ε ≥ log((TPR_low − δ) / FPR_high)   and   ε ≥ log((TNR_low − δ) / FNR_high),

where TNR_low = 1 − FPR_high and FNR_high = 1 − TPR_low. The lower bound is the largest of these over
thresholds (terms with a non-positive numerator say nothing and are skipped; ε ≥ 0 always). A lower bound
above the claimed ε is a violation.

Caveats, stated where the numbers are shown: the intervals hold per threshold (no correction for taking the
maximum), and the game's members and non-members stand for the two neighbouring worlds, as in the tutorial.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import beta
from sklearn.metrics import roc_curve

from arena.metrics import FPR_LEVELS, tpr_key
from arena.store import RunStore

CONFIDENCE = 0.95


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
    """The empirical ε lower bound of one attack's ROC and the threshold it was found at."""

    epsilon: float  # 0.0 when no threshold gives evidence
    n_members: int
    n_nonmembers: int
    true_positives: int  # counts at the best threshold
    false_positives: int
    direction: str  # "tpr/fpr", "tnr/fnr" or "" when no evidence


def empirical_epsilon(
    scores: np.ndarray, is_member: np.ndarray, delta: float, confidence: float = CONFIDENCE
) -> EpsilonLowerBound:
    """The largest ε lower bound over the thresholds of the ROC of ``scores`` (higher means member)."""
    is_member = np.asarray(is_member).astype(bool).reshape(-1)
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    n_in, n_out = int(is_member.sum()), int((~is_member).sum())
    if n_in == 0 or n_out == 0:
        raise ValueError(f"an ε lower bound needs members and non-members, got {n_in} and {n_out}")
    fpr, tpr, _ = roc_curve(is_member, scores, drop_intermediate=False)
    tp = np.rint(tpr * n_in).astype(np.int64)
    fp = np.rint(fpr * n_out).astype(np.int64)
    # Only the pessimistic ends count: TPR_low and FPR_high (so TNR_low = 1 − FPR_high, FNR_high = 1 − TPR_low).
    # FPR_high > 0 and TPR_low < 1 for finite samples, so the denominators are positive.
    tpr_low, _ = clopper_pearson(tp, n_in, confidence)
    _, fpr_high = clopper_pearson(fp, n_out, confidence)
    forward = _log_ratio(tpr_low - delta, fpr_high)
    backward = _log_ratio((1.0 - fpr_high) - delta, 1.0 - tpr_low)
    best_fwd, best_bwd = int(np.argmax(forward)), int(np.argmax(backward))
    if max(forward[best_fwd], backward[best_bwd]) <= 0.0:
        return EpsilonLowerBound(0.0, n_in, n_out, 0, 0, "")
    if forward[best_fwd] >= backward[best_bwd]:
        return EpsilonLowerBound(float(forward[best_fwd]), n_in, n_out, int(tp[best_fwd]), int(fp[best_fwd]), "tpr/fpr")
    return EpsilonLowerBound(float(backward[best_bwd]), n_in, n_out, int(tp[best_bwd]), int(fp[best_bwd]), "tnr/fnr")


def _log_ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """log(numerator / denominator) where the numerator is positive, −inf elsewhere."""
    out = np.full(np.shape(numerator), -np.inf)
    ok = numerator > 0
    out[ok] = np.log(numerator[ok] / denominator[ok])
    return out


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
    """One membership matchup against a claimed (ε, δ): the bounds the claim implies and what the attack shows."""

    advantage: float | None
    advantage_bound: float
    tpr_at_fpr: tuple[tuple[float, float | None, float], ...]  # (FPR level, measured TPR or None, TPR bound)
    lower_bound: EpsilonLowerBound

    @property
    def violation(self) -> bool:
        return self.lower_bound.epsilon > self.claimed_epsilon


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
    """Audit one ok membership row whose defense claims (ε, δ), from its saved scores and is_member arrays."""
    eps, delta = _claimed(row)
    metrics = row.get("metrics") or {}
    scores = np.asarray(arrays["scores"], dtype=np.float64)
    is_member = np.asarray(arrays["is_member"]).astype(bool)
    tprs = tuple((level, metrics.get(tpr_key(level)), tpr_bound(eps, delta, level)) for level in FPR_LEVELS)
    return MembershipAudit(
        **_identity(row),
        claimed_epsilon=eps,
        delta=delta,
        advantage=metrics.get("advantage"),
        advantage_bound=advantage_bound(eps, delta),
        tpr_at_fpr=tprs,
        lower_bound=empirical_epsilon(scores, is_member, delta),
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
    """The finding in one line: the bound, the claim, and the counts it rests on."""
    lb = a.lower_bound
    return (
        f"empirical ε ≥ {lb.epsilon:.3f} > claimed ε = {a.claimed_epsilon:.3f} (δ = {a.delta:g}; "
        f"95% Clopper–Pearson, {lb.true_positives}/{lb.n_members} members and "
        f"{lb.false_positives}/{lb.n_nonmembers} non-members flagged at the threshold)"
    )
