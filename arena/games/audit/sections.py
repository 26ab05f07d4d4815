"""The audit game's part of the report: each matchup's estimators per canary kind, its canaries' ROC curves over
the claim's add/remove trade-off curve (drawn by the report from the panels handed over), and its rows of the DP
audit (violations first)."""

from __future__ import annotations

import json
from typing import Any

from markupsafe import Markup

from arena.games.audit.rule import KINDS, _mechanism, fmt_or_dash

ESTIMATORS = (("eps_one_run", "one-run ε ≥ (assumption-free)"), ("eps_fdp", "f-DP ε ≥ (assumption-free)"),
              ("eps_gdp_fit", "Gaussian-fit ε ≥ (model-based: assumes the release is the recorded DP-SGD)"),
              ("eps_sigma_fit", "σ-fit ε ≥ (model-based: assumes the release is the recorded DP-SGD)"),
              ("fdp_claim_refuted", "f-DP: claim's curve rejected"),
              ("eps_fdp_gdp", "f-DP GDP estimate ε"),
              ("eps_heldout", "held-out CP ε ≥"), ("eps_gdp", "GDP ε (threshold)"),
              ("max_certifiable", "one-run max certifiable"), ("canaries", "canaries"))


def section(ctx: Any) -> Markup:
    """One row per ok matchup of the track: claimed ε, models, and every estimator of every canary kind."""
    kinds = [k for k in KINDS if any((r.get("metrics") or {}).get(f"{k}_canaries") for r in ctx.rows)]
    headers = ["defense", "attack", "seed", "claimed ε", "empirical ε ≥ (95 %, assumption-free)", "models",
               *(f"{k}: {label}" for k in kinds for _, label in ESTIMATORS)]
    rows = []
    for r in ctx.rows:
        m = r.get("metrics") or {}
        if r.get("status") != "ok":
            continue
        cells = [r["defense_label"], r["attack_label"], r["seed"], fmt_or_dash(m.get("claimed_epsilon")),
                 fmt_or_dash(m.get("empirical_epsilon")), m.get("models", "—")]
        for k in kinds:
            for e, _ in ESTIMATORS:
                v = m.get(f"{k}_{e}")
                if isinstance(v, bool):
                    cells.append("yes" if v else "no")
                else:
                    cells.append(v if e == "canaries" and v is not None else fmt_or_dash(v))
        rows.append(cells)
    return ctx.render("canary-audit.html.j2", track=ctx.board.track, headers=headers, rows=rows,
                      tradeoff=audited_rocs(ctx))


def audited_rocs(ctx: Any) -> Markup:
    """The audited ROC figure: per defense × attack × claim, the panel of its lowest seed (the seeds of one
    configuration draw nearly the same curves, and each log-log panel costs a third of a second per format to draw);
    the table beside it reads every audited matchup."""
    panels = tradeoff_panels(ctx)
    first: dict[tuple[Any, ...], Any] = {}
    for p in panels:  # sorted by claimed ε, defense, attack, seed: the first of a group is its lowest seed
        first.setdefault((p.defense, p.attack, json.dumps(p.claim, sort_keys=True, default=str)), p)
    drawn = [p for p in panels if any(p is q for q in first.values())]
    why = (f"Drawn: each defense × attack's lowest seed ({len(drawn)} of {len(panels)} audited matchups; the table "
           "reads them all).") if len(drawn) < len(panels) else ""
    return ctx.tradeoff(panels, f"{ctx.board.track}-tradeoff-roc", drawn=drawn, why=why)


def tradeoff_panels(ctx: Any) -> list[Any]:
    """One panel per audited matchup (ok, claiming (ε, δ), canary scores saved): each kind's canaries pooled over
    the K models, drawn over the claim's **add/remove** trade-off curve (a canary is added or removed)."""
    panels = []
    for r in sorted(ctx.rows, key=lambda r: (float((r.get("claim") or {}).get("epsilon") or 0.0),
                                             r["defense_label"], r["attack_label"], r["seed"])):
        claim = r.get("claim") or {}
        if r.get("status") != "ok" or claim.get("epsilon") is None or claim.get("delta") is None:
            continue
        saved = ctx.arrays(r["key"])
        if saved is None:
            continue
        input_kind = (r.get("metrics") or {}).get("input_kind")
        curves = tuple(
            ctx.RocCurve(f"{k} canaries" + (f" ({input_kind})" if k == "input" and input_kind else ""),
                         saved[f"{k}_scores"], saved[f"{k}_truth"])
            for k in KINDS if f"{k}_scores" in saved and f"{k}_truth" in saved)
        if curves:
            panels.append(ctx.RocPanel(f"{r['defense_label']} vs {r['attack_label']}, seed {r['seed']}", claim,
                                       "add_remove", curves, defense=r["defense_label"],
                                       attack=r["attack_label"]))
    return panels


def audit_section(audit: Any, page: Any) -> Markup:
    """Every audit matchup against its claim, violations first: the assumption-free empirical ε with each kind's
    one-run and f-DP bounds, the gradient canaries' model-based fit (labelled, outside the verdict), the claim
    check."""
    fmt = page.fmt
    records = audit.records if audit is not None else ()
    rows, classes = [], []
    for a in records:  # sorted by the rule: violations first
        bounds = "; ".join(f"{k}: {b.epsilon:.3f} ({b.correct}/{b.guesses}, ≤ {b.max_certifiable:.3f})"
                           for k, b in a.bounds)
        bounds += "".join(f"; {k} f-DP: {f.epsilon:.3f}" for k, f in a.fdp)
        g, sg = a.gaussian, a.sigma
        if sg is not None:
            fit = f"σ fit {sg.epsilon:.3f} (σ ≤ {sg.sigma_hi:.4f}; d = {sg.d_hat:.4f} ± {sg.se:.4f})"
        elif g is not None:
            fit = f"{g.epsilon:.3f} (μ ≥ {g.mu_lo:.4f}; μ̂ = {g.mu_hat:.4f} ± {g.se:.4f})"
        else:
            fit = "— (no recorded mechanism, or a post-processed release)"
        fit += "".join(f"; {k} f-DP: curve {'REJECTED' if f.claim_refuted else 'holds'}" for k, f in a.fdp
                       if f.claim_refuted is not None)
        check = _mechanism(a) + (" (cannot decide)" if a.claim_check == "cannot decide" else "")
        classes.append("violation" if a.violation else "")
        rows.append([a.track, a.defense_label, a.attack, a.seed, fmt(a.claimed_epsilon), f"{a.delta:g}", a.models,
                     fmt(a.lower_bound), bounds, fit, check, "VIOLATION" if a.violation else "consistent"])
    return page.render("canary-audit-rule.html.j2", audit_rows=rows, audit_classes=classes,
                       missing=list(audit.missing) if audit is not None else [])
