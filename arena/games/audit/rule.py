"""The audit game's rule: a violation iff the canaries refute the claim or the claim's own arithmetic fails.

For every ok audit row whose defense claims (ε, δ), the verdict's bounds are recomputed from the saved canary
scores and bits: the one-run bound of Steinke, Nasr & Jagielski 2023 for each kind and, when the claim is full
batch (sample rate 1), the gradient canaries' Gaussian-fit bound (exact there, see ``arena.games.audit.canaries``),
each at α/#bounds (Bonferroni, so one test at level α per matchup, simulated in tests/test_canaries.py). They are
compared with the claimed **add/remove** ε: a canary is added to or removed from one model's training, so add/remove
is the relation the game plays. The claim check (the PLD ε of the σ, q and steps the engine really ran, recorded in the
row's metrics) refutes a claim whose accounting does not match its mechanism, whatever the canaries show. Either
is a violation and sets exit status 3. The held-out Clopper–Pearson and one-threshold Gaussian-DP figures are
estimates: shown, never a verdict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from arena.privacy.binomial import ALPHA
from arena.privacy.gdp import GaussianBound, gaussian_bound, gaussian_kind
from arena.privacy.one_run import OneRunBound, one_run_epsilon
from arena.results.audit import ArrayLoader, AuditedMatchup, GameAudit, claimed, identity, split_seed

KINDS = ("gradient", "input")


@dataclass(frozen=True)
class CanaryAuditRecord(AuditedMatchup):
    """One audit matchup against its claim: each kind's one-run bound and, for a full-batch claim, the gradient
    canaries' Gaussian-fit bound (recomputed from the saved arrays), the estimates reported by the game, the claim
    check, the verdict."""

    bounds: tuple[tuple[str, OneRunBound], ...]
    gaussian: GaussianBound | None
    estimates: Mapping[str, float | None]
    models: int
    alpha: float
    mechanism_epsilon: float | None
    noise_free: bool
    claim_consistent: bool

    @property
    def lower_bound(self) -> float:
        """The empirical ε: the largest of the verdict's bounds."""
        one_run = max((b.epsilon for _, b in self.bounds), default=0.0)
        return max(one_run, self.gaussian.epsilon) if self.gaussian else one_run

    @property
    def flagged(self) -> bool:
        """Refuted by the canaries: one of the verdict's bounds (each at α/#bounds) above the claimed add/remove ε."""
        return self.lower_bound > self.claimed_epsilon

    @property
    def violation(self) -> bool:
        return self.flagged or not self.claim_consistent


def audit_row(row: Mapping[str, Any], saved: Mapping[str, Any]) -> CanaryAuditRecord:
    """Audit one ok audit row from its saved ``<kind>_scores`` and ``<kind>_truth`` arrays."""
    eps, delta = claimed(row)
    metrics = row.get("metrics") or {}
    alpha = float(metrics.get("alpha") or ALPHA)
    kinds = [k for k in KINDS if f"{k}_scores" in saved and f"{k}_truth" in saved]
    # the Gaussian fit only where the release is the state train returned (the game's claim check records it)
    trained = bool(metrics.get("release_is_trained"))
    fitted = gaussian_kind((row.get("claim") or {}).get("sample_rate"), kinds) if trained else None
    a = alpha / (len(kinds) + (fitted is not None))
    scores = {k: np.asarray(saved[f"{k}_scores"], np.float64).reshape(-1) for k in kinds}
    truths = {k: np.asarray(saved[f"{k}_truth"]).astype(bool).reshape(-1) for k in kinds}
    bounds = tuple((k, one_run_epsilon(scores[k], truths[k], a, delta, seed=split_seed(row["key"]))) for k in kinds)
    gaussian = None if fitted is None else gaussian_bound(scores[fitted], truths[fitted], delta, a)
    estimates = {f"{k}_{e}": metrics.get(f"{k}_{e}") for k in kinds
                 for e in ("eps_one_run", "eps_heldout", "eps_gdp", "eps_gdp_fit", "max_certifiable", "canaries")}
    return CanaryAuditRecord(
        **identity(row), claimed_epsilon=eps, delta=delta, bounds=bounds, gaussian=gaussian, estimates=estimates,
        models=int(metrics.get("models") or 0), alpha=alpha, mechanism_epsilon=metrics.get("mechanism_epsilon"),
        noise_free=bool(metrics.get("mechanism_noise_free", False)),
        claim_consistent=bool(metrics.get("claim_consistent", True)),
    )


def _mechanism(a: CanaryAuditRecord) -> str:
    if a.noise_free:
        return "∞ (no noise)"
    return "—" if a.mechanism_epsilon is None else f"{a.mechanism_epsilon:.3f}"


def describe_violation(a: CanaryAuditRecord) -> str:
    parts = []
    if a.flagged:
        k, b = max(a.bounds, key=lambda kb: kb[1].epsilon)
        g = a.gaussian
        if g is not None and g.epsilon >= b.epsilon:
            parts.append(f"gradient canaries: Gaussian-fit ε ≥ {g.epsilon:.3f} > claimed add/remove ε = "
                         f"{a.claimed_epsilon:.3f} ({1 - g.alpha:.1%} confidence; μ̂ = {g.mu_hat:.4f} ± "
                         f"{g.se:.4f}, μ ≥ {g.mu_lo:.4f}, {g.n_pos} + {g.n_neg} canaries over {a.models} models)")
        else:
            parts.append(f"{k} canaries: one-run ε ≥ {b.epsilon:.3f} > claimed add/remove ε = "
                         f"{a.claimed_epsilon:.3f} ({1 - b.alpha:.1%} confidence; {b.correct}/{b.guesses} guesses "
                         f"correct of {b.m} canaries over {a.models} models)")
    if not a.claim_consistent:
        parts.append(f"the mechanism really run (σ, q, steps) has PLD ε = {_mechanism(a)} > claimed "
                     f"ε = {a.claimed_epsilon:.3f}")
    return "; ".join(parts)


def describe_audit(a: CanaryAuditRecord) -> str:
    bounds = ", ".join(f"{k} one-run ε ≥ {b.epsilon:.3f} (≤ {b.max_certifiable:.3f} certifiable)"
                       for k, b in a.bounds)
    if a.gaussian is not None:
        bounds += f", gradient Gaussian-fit ε ≥ {a.gaussian.epsilon:.3f} (μ resolved to ±{a.gaussian.se:.4f})"
    verdict = "VIOLATION: " + describe_violation(a) if a.violation else "consistent"
    return (f"{a.defense_label} vs {a.attack} seed {a.seed}: {bounds} vs claimed ε = {a.claimed_epsilon:.3f} "
            f"(mechanism run: {_mechanism(a)}): {verdict}")


def audit_game(rows: Sequence[Mapping[str, Any]], arrays: ArrayLoader) -> GameAudit:
    """Audit every claiming audit row from its saved canary scores; rows whose arrays are missing are listed."""
    records, missing = [], []
    for row in rows:
        saved = arrays(row["key"])
        if saved is None or not any(f"{k}_scores" in saved for k in KINDS):
            missing.append(row["key"])
            continue
        records.append(audit_row(row, saved))
    records.sort(key=lambda a: (not a.violation, a.track, a.defense_label, a.attack, a.seed))
    violations = tuple(a for a in records if a.violation)
    return GameAudit(
        game="audit", records=tuple(records), violations=violations,
        findings={a.key: describe_violation(a) for a in violations},
        lines=tuple(describe_audit(a) for a in records), missing=tuple(missing), tested=len(records),
    )


def fmt_or_dash(value: float | None) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"
