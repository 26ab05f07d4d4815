"""The gradients game's part of the report: success against the defenses' strength (client DP-SGD's ε, the
pruning rate), the grids of records beside their reconstructions, and its rows of the DP audit.

Success is pooled over the seeds of the track (successes over trials); the undefended cell (``nonprivate``) is
drawn at ε = ∞ and at pruning rate 0. Batch size is a game parameter, so success against B compares tracks: the
board of each track, side by side (``docs/results.md`` shows it for ``scenarios/gradients.yaml``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from markupsafe import Markup

from arena.games.gradients.grids import GRID_FILE
from arena.games.reconstruction.rule import describe_reconstruction
from arena.games.reconstruction.sections import audit_rows, grid_figures

STRENGTHS = {"client-dpsgd": ("ε (client DP-SGD)", "epsilons"), "gradient-pruning": ("pruned share", "rates")}
"""Defense → (axis label, the parameter holding its one value per configuration)."""


def strength_points(rows: list[dict[str, Any]], defense: str, param: str) -> dict[str, list[tuple[float, float]]]:
    """attack → [(strength, success pooled over seeds)], sorted by strength; the undefended rows at the weak end
    (ε = ∞ is drawn at twice the largest ε; pruning rate 0)."""
    hits: dict[tuple[str, float], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in rows:
        m = r.get("metrics") or {}
        if r.get("status") != "ok" or m.get("target_success_rate") is None or not m.get("n_trials"):
            continue
        if r["defense"] == defense:
            x = float(r["defense_params"][param][0])
        elif r["defense"] == "nonprivate":
            x = float("inf") if param == "epsilons" else 0.0
        else:
            continue
        cell = hits[(r["attack_label"], x)]
        cell[0] += m["target_success_rate"] * m["n_trials"]
        cell[1] += m["n_trials"]
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for (attack, x), (k, n) in sorted(hits.items(), key=lambda item: item[0][1]):
        out[attack].append((x, k / n))
    return dict(out)


def _curve(points: dict[str, list[tuple[float, float]]], label: str, log: bool) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    finite = [x for pts in points.values() for x, _ in pts if x != float("inf")]
    infinity = 2 * max(finite) if finite else 1.0
    fig = Figure(figsize=(4.2, 3.0))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for attack, pts in points.items():
        ax.plot([infinity if x == float("inf") else x for x, _ in pts], [s for _, s in pts], marker="o",
                label=attack)
    if log:
        ax.set_xscale("log")
    ax.set_xlabel(label + (" (∞ drawn at twice the largest)" if log else ""))
    ax.set_ylabel("success rate (targets)")
    ax.set_ylim(-0.03, 1.03)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def section(ctx: Any) -> Markup:
    """Success against each defense's strength, then every saved grid (copied into the report's figures)."""
    fmt, slug = ctx.fmt, ctx.slug
    curves = []
    for defense, (label, param) in STRENGTHS.items():
        points = strength_points(ctx.rows, defense, param)
        if any(len(p) > 1 for p in points.values()):
            png = ctx.figures.save(_curve(points, label, param == "epsilons"), slug(f"{ctx.board.track}-{defense}"))
            curves.append((png, f"{ctx.board.track}: success against {label}, pooled over seeds"))

    def caption(r: dict[str, Any]) -> str:
        m = r.get("metrics") or {}
        return (f"{r['track']}: {r['defense_label']} vs {r['attack_label']}, seed {r['seed']}; success "
                f"{fmt(m.get('success_rate'))}, target PSNR {fmt(m.get('target_psnr_mean'))} dB")

    figures = grid_figures(ctx, caption, GRID_FILE)
    return ctx.render("gradients.html.j2", track=ctx.board.track, figures=figures, curves=curves)


def audit_section(audit: Any, page: Any) -> Markup:
    """Every gradients matchup against a claim: the targets' success beside both bounds."""
    fmt = page.fmt
    records = audit.records if audit is not None else ()
    rows = audit_rows(records, fmt)
    return page.render("gradients-audit.html.j2", grad_rows=rows,
                       grad_lines=[describe_reconstruction(r) for r in records if r.exceeds])
