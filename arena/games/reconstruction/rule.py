"""The reconstruction game's audit rule: the measured success rate beside the success the guarantee allows.

Balle et al.'s bound allows a success probability of at most e^ε·κ + δ, where κ is the prior's mass within the
success radius (exact, 1/n, under the game's discrete prior; a lower estimate of the supremum under the continuous
one). Beside it stands the tighter valid bound of ``arena.games.reconstruction.bounds``: Hayes, Mahloujifar & Balle 2023
for a DP-SGD claim that records σ, q and T (Φ(Φ⁻¹(κ) + √T/σ) at full batch, the subsampled Gaussian's trade-off
curve from dp_accounting's PLD otherwise), the (ε, δ) trade-off bound 1 − f_{ε,δ}(κ) for any other claim. "Above
the bound" is a one-sided Clopper–Pearson test at level 2.5% of "success probability ≤ the tighter bound" on the
success count (each released model is one independent trial); with an estimated κ it holds for that estimate.
It is a finding of the report, not a violation of the claim (it does not set exit status 3).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from arena.results.audit import ArrayLoader, AuditedMatchup, GameAudit, claimed, clopper_pearson, identity, scaled


def reconstruction_bound(epsilon: float, delta: float, kappa: float) -> float:
    """The largest reconstruction success probability an (ε, δ)-DP release allows: e^ε·κ + δ (at most 1)."""
    return scaled(epsilon, kappa, delta)


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


def reconstruction_bounds(claim: Mapping[str, Any], kappa: float) -> tuple[float, float, str]:
    """(e^ε·κ + δ, the tighter valid bound, how the latter was computed) for a claim (a result row's ``claim``).

    A claim that records a Gaussian mechanism's noise multiplier, sampling rate and steps (DP-SGD) gets Hayes et
    al.'s bound for it; any other claim the (ε, δ) trade-off bound. The tighter is the smaller of the valid ones.
    """
    from arena.games.reconstruction.bounds import dpsgd_bound, tradeoff_dp_bound

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
    eps, delta = claimed(row)
    n = int(metrics["n_targets"])
    rate = float(metrics["success_rate"])
    kappa = float(metrics["kappa"])
    low, _ = clopper_pearson(round(rate * n), n, 0.95)  # two-sided 95% low end = one-sided 97.5%
    allowed, bound, how = reconstruction_bounds(row["claim"], kappa)
    return ReconstructionAudit(
        **identity(row),
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


def audit_game(rows: Sequence[Mapping[str, Any]], arrays: ArrayLoader) -> GameAudit:
    """Audit every claiming reconstruction row that reports κ (from its metrics alone)."""
    records = tuple(a for a in (audit_reconstruction(dict(row)) for row in rows) if a is not None)
    return GameAudit(game="reconstruction", records=records)
