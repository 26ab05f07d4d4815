"""The audit game's rule: a violation iff the canaries refute the claim or the claim's own arithmetic fails.

For every ok audit row whose defense claims (ε, δ), the verdict's tests are recomputed from the saved canary
scores and bits by ``arena.games.audit.verdict``: per kind the one-run bound (Steinke, Nasr & Jagielski 2023) and
the f-DP one-run analysis (Mahloujifar, Melis & Chaudhuri 2025: the largest ε whose (ε, δ) curve it rejects and,
where the claim records σ, q and T, its test of the claim's own curve), each at α/#tests (Bonferroni, one test at
level α per matchup). All are assumption-free; the largest lower bound is the headline empirical ε, compared with
the claimed **add/remove** ε (a canary is added to or removed from one model's training). The gradient canaries'
Gaussian fit (q = 1) or σ fit (q < 1) is **model-based** (it assumes the release is the recorded DP-SGD): shown,
labelled, never the headline nor the verdict. The claim check (the PLD ε of the mechanisms the engine really ran,
composed as they ran) refutes a claim whose accounting does not match its mechanism, whatever the canaries show,
and says "cannot decide" where how the calls compose cannot be verified. A violation sets exit status 3. The
held-out Clopper–Pearson, one-threshold Gaussian-DP and f-DP GDP-family figures are estimates.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from arena.games.audit.verdict import MODEL_BASED, fitted_kind, mechanism, n_tests, verdict_bounds
from arena.privacy.binomial import ALPHA
from arena.privacy.fdp_one_run import FdpBound, claim_fbar
from arena.privacy.gdp import GaussianBound
from arena.privacy.one_run import OneRunBound
from arena.privacy.sigma_fit import SigmaFit
from arena.results.audit import ArrayLoader, AuditedMatchup, GameAudit, claimed, identity, split_seed

KINDS = ("gradient", "input")


@dataclass(frozen=True)
class CanaryAuditRecord(AuditedMatchup):
    """One audit matchup against its claim, recomputed from the saved arrays (``arena.games.audit.verdict``):
    each kind's one-run bound and f-DP analysis (the verdict's); the gradient canaries' model-based Gaussian fit
    (q = 1) or σ fit (q < 1) where it applies; the estimates reported by the game, the claim check, the verdict."""

    bounds: tuple[tuple[str, OneRunBound], ...]
    gaussian: GaussianBound | None
    estimates: Mapping[str, float | None]
    models: int
    alpha: float
    mechanism_epsilon: float | None
    noise_free: bool
    claim_consistent: bool
    fdp: tuple[tuple[str, FdpBound], ...] = ()
    sigma: SigmaFit | None = None
    claim_check: str = "consistent"
    """The claim check's word (``consistent``, ``violation``, ``cannot decide``: how the calls compose could not
    be verified, so the check declares nothing)."""

    @property
    def lower_bound(self) -> float:
        """The empirical ε (headline): the largest of the verdict's assumption-free bounds (one-run, f-DP)."""
        out = max((b.epsilon for _, b in self.bounds), default=0.0)
        return max([out, *(f.epsilon for _, f in self.fdp)])

    @property
    def model_based_epsilon(self) -> float | None:
        """The gradient canaries' σ fit or Gaussian fit: it assumes the release is the recorded DP-SGD."""
        fit = self.sigma if self.sigma is not None else self.gaussian
        return None if fit is None else fit.epsilon

    @property
    def curve_refuted(self) -> bool:
        """The claim's own trade-off curve rejected by a kind's f-DP one-run test."""
        return any(f.claim_refuted for _, f in self.fdp)

    @property
    def flagged(self) -> bool:
        """Refuted by the canaries: a verdict figure (each test at α/#tests) above the claimed add/remove ε, or
        the claim's curve rejected."""
        return self.lower_bound > self.claimed_epsilon or self.curve_refuted

    @property
    def violation(self) -> bool:
        return self.flagged or not self.claim_consistent


def audit_row(row: Mapping[str, Any], saved: Mapping[str, Any]) -> CanaryAuditRecord:
    """Audit one ok audit row from its saved ``<kind>_scores`` and ``<kind>_truth`` arrays."""
    eps, delta = claimed(row)
    metrics = row.get("metrics") or {}
    alpha = float(metrics.get("alpha") or ALPHA)
    kinds = [k for k in KINDS if f"{k}_scores" in saved and f"{k}_truth" in saved]
    # the fits only where the release is the state train returned (the game's claim check records it)
    trained = bool(metrics.get("release_is_trained"))
    claim = {**(row.get("claim") or {}), "epsilon": eps, "delta": delta}
    fitted = fitted_kind(claim, kinds, trained)
    a = alpha / n_tests(claim, kinds, trained)
    mech = mechanism(claim)
    curve = claim_fbar(*mech) if mech is not None else None
    bounds, fdps, gaussian, sigma = [], [], None, None
    for k in kinds:
        one, fdp, fit, sig = verdict_bounds(claim, k, np.asarray(saved[f"{k}_scores"], np.float64),
                                            np.asarray(saved[f"{k}_truth"]).astype(bool), a, k == fitted,
                                            split_seed(row["key"]), curve, alpha)
        bounds.append((k, one))
        fdps.append((k, fdp))
        gaussian, sigma = gaussian or fit, sigma or sig
    estimates = {f"{k}_{e}": metrics.get(f"{k}_{e}") for k in kinds
                 for e in ("eps_one_run", "eps_heldout", "eps_gdp", "eps_gdp_fit", "eps_fdp_gdp", "max_certifiable",
                           "canaries")}
    return CanaryAuditRecord(
        **identity(row), claimed_epsilon=eps, delta=delta, bounds=tuple(bounds), gaussian=gaussian,
        estimates=estimates, models=int(metrics.get("models") or 0), alpha=alpha,
        mechanism_epsilon=metrics.get("mechanism_epsilon"),
        noise_free=bool(metrics.get("mechanism_noise_free", False)),
        claim_consistent=bool(metrics.get("claim_consistent", True)), fdp=tuple(fdps), sigma=sigma,
        claim_check=str(metrics.get("claim_check") or
                        ("consistent" if metrics.get("claim_consistent", True) else "violation")),
    )


def _mechanism(a: CanaryAuditRecord) -> str:
    if a.noise_free:
        return "∞ (no noise)"
    return "—" if a.mechanism_epsilon is None else f"{a.mechanism_epsilon:.3f}"


def describe_violation(a: CanaryAuditRecord) -> str:
    parts = []
    if a.lower_bound > a.claimed_epsilon:
        k, b = max(a.bounds, key=lambda kb: kb[1].epsilon)
        kf, f = max(a.fdp, key=lambda kf: kf[1].epsilon, default=(k, None))
        if f is not None and f.epsilon > b.epsilon:
            parts.append(f"{kf} canaries: f-DP one-run ε ≥ {f.epsilon:.3f} > claimed add/remove ε = "
                         f"{a.claimed_epsilon:.3f} ({1 - f.alpha:.1%} confidence, assumption-free; "
                         f"{f.correct}/{f.guesses} guesses correct of {f.m} held-out canaries over {a.models} models)")
        else:
            parts.append(f"{k} canaries: one-run ε ≥ {b.epsilon:.3f} > claimed add/remove ε = "
                         f"{a.claimed_epsilon:.3f} ({1 - b.alpha:.1%} confidence, assumption-free; "
                         f"{b.correct}/{b.guesses} guesses correct of {b.m} held-out canaries over {a.models} models)")
    for k, f in a.fdp:
        if f.claim_refuted:
            parts.append(f"{k} canaries: the claim's own trade-off curve is rejected by the f-DP one-run test "
                         f"({1 - f.alpha:.1%} confidence; {f.correct}/{f.guesses} guesses correct of {f.m} "
                         "held-out canaries)")
    if not a.claim_consistent:
        parts.append(f"the mechanism really run (σ, q, steps) has PLD ε = {_mechanism(a)} > claimed "
                     f"ε = {a.claimed_epsilon:.3f}")
    return "; ".join(parts)


def describe_model_based(a: CanaryAuditRecord) -> str:
    """The gradient canaries' σ or Gaussian fit, labelled model-based, or "" where none applies."""
    if a.sigma is not None:
        sg = a.sigma
        return (f"gradient σ-fit ε ≥ {sg.epsilon:.3f} (σ ≤ {sg.sigma_hi:.4f}; {MODEL_BASED}; not the headline)")
    if a.gaussian is not None:
        g = a.gaussian
        return (f"gradient Gaussian-fit ε ≥ {g.epsilon:.3f} (μ resolved to ±{g.se:.4f}; {MODEL_BASED}; "
                "not the headline)")
    return ""


def describe_audit(a: CanaryAuditRecord) -> str:
    bounds = ", ".join(f"{k} one-run ε ≥ {b.epsilon:.3f} (≤ {b.max_certifiable:.3f} certifiable)"
                       for k, b in a.bounds)
    bounds += "".join(f", {k} f-DP ε ≥ {f.epsilon:.3f}" for k, f in a.fdp)
    bounds += "".join(f", {k} f-DP: claim's curve {'rejected' if f.claim_refuted else 'not rejected'} "
                      f"(GDP estimate ε ≈ {f.gdp_epsilon:.3f})" for k, f in a.fdp if f.claim_refuted is not None)
    model = describe_model_based(a)
    verdict = "VIOLATION: " + describe_violation(a) if a.violation else "consistent"
    if a.claim_check == "cannot decide":
        verdict += " (claim check: cannot decide how the train calls compose)"
    return (f"{a.defense_label} vs {a.attack} seed {a.seed}: empirical ε ≥ {a.lower_bound:.3f} (assumption-free: "
            f"{bounds}){'; ' + model if model else ''} vs claimed ε = {a.claimed_epsilon:.3f} "
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
