"""``RUN_DIR/report/index.html``: one self-contained page (figures embedded as PNG, no scripts), rendered from the
Jinja2 templates in ``arena/report/templates/`` with autoescape on; every figure is also written as SVG and PDF
under ``RUN_DIR/report/figures/``.

Sections: DP violations (if any); per track the leaderboard tables (ranking metric, the metrics beside it, their
intervals), heatmaps and privacy-utility curves, then the track's game section (``SECTIONS``: membership's ROC
curves, most exposed records and per-class TPR; reconstruction's grids); the DP audit; notes; the scenarios as
run; per-matchup timings. The core page template names no game.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from markupsafe import Markup

import arena
from arena import leaderboard
from arena.audit import (
    Audit,
    MembershipAudit,
    audit_store,
    describe_reconstruction,
    describe_violation,
    saved_arrays,
    violation_findings,
)
from arena.leaderboard import TrackBoard
from arena.report import membership, plots, reconstruction
from arena.report.context import TrackContext, fmt, render
from arena.store import RunStore

SECTIONS: dict[str, Callable[[TrackContext], Markup]] = {
    "membership": membership.section,
    "reconstruction": reconstruction.section,
}
"""Game name → the function that renders that game's part of a track (its own template)."""

FIGURES = "report/figures"


def _frame_rows(df, index_name: str) -> tuple[list[str], list[list[str]]]:  # noqa: ANN001 - a DataFrame
    """A DataFrame as headers and formatted cells."""
    headers = [index_name, *map(str, df.columns)]
    body = [[str(idx), *(fmt(v) for v in df.loc[idx].tolist())] for idx in df.index]
    return headers, body


def board_section(board: TrackBoard, ctx: TrackContext, flagged: set[tuple[str, str]]) -> Markup:
    """One track's leaderboard: tables, heatmaps (or the number, for a single cell) and privacy-utility curves."""
    cells = board.cells.copy()
    cells.insert(0, "utility", [fmt(u) for u in board.utility])
    main = (["defense", *map(str, cells.columns)], [[d, *map(str, rec)] for d, rec in zip(cells.index, cells.values)])
    beside = []
    for m in board.beside:
        grid = board.grids[m]
        beside.append((m, (["defense", *map(str, grid.cells.columns)],
                           [[d, *map(str, rec)] for d, rec in zip(grid.cells.index, grid.cells.values)])))
    intervals = []
    for m in board.shown:
        if m in board.grids:
            table = leaderboard.interval_table(board, m)
            intervals.append((m, (["defense", *map(str, table.columns)],
                                  [[d, *map(str, rec)] for d, rec in zip(table.index, table.values)])))
    heatmaps, single = [], []
    for m in board.shown:
        grid = board.grids.get(m)
        if grid is None:
            continue
        if grid.means.size <= 1:  # one defense, one attack: the number says it all
            d, a = grid.means.index[0], grid.means.columns[0]
            single.append((m, grid.cells.loc[d, a], grid.intervals.get((d, a))))
            continue
        png = ctx.figures.save(plots.heatmap(board, m, flagged), f"{board.track}-heatmap-{m}")
        heatmaps.append((m, png))
    pu = ctx.figures.save(plots.privacy_utility(board, ctx.rows), f"{board.track}-privacy-utility")
    return render(
        "board.html.j2", board=board, main=main, beside=beside, intervals=intervals, heatmaps=heatmaps,
        single=single, privacy_utility=pu,
        attack_ranking=_frame_rows(board.attack_ranking, "attack"),
        defense_ranking=_frame_rows(board.defense_ranking, "defense"),
    )


def _audit_verdict(a: MembershipAudit) -> str:
    if a.violation:
        return "VIOLATION"
    if a.lower_bound.max_certifiable <= a.relation_epsilon:
        return "cannot refute: the claim is above what this sample could certify"
    return "consistent"


def audit_section(audit: Audit) -> Markup:
    """Every membership matchup against a claim, violations first: the replace-one ε tested, the held-out bound,
    the largest bound the held-out counts could certify; every reconstruction matchup against its bounds."""
    membership_rows, membership_classes = [], []
    for a in sorted(audit.membership, key=lambda a: not a.violation):
        lb = a.lower_bound
        one_run = (f"{a.one_run.epsilon:.3f} ({a.one_run.correct}/{a.one_run.guesses} pairs)"
                   if a.one_run is not None else "—")
        membership_classes.append("violation" if a.violation else "")
        membership_rows.append([a.track, a.defense_label, a.attack, a.seed, fmt(a.claimed_epsilon), f"{a.delta:g}",
                      f"{fmt(a.relation_epsilon)} ({a.relation_how})" if a.relation_how else fmt(a.relation_epsilon),
                      fmt(lb.epsilon), fmt(lb.max_certifiable),
                      f"{lb.n_members} + {lb.n_nonmembers} of {lb.n_members_total} + {lb.n_nonmembers_total}",
                      f"{lb.true_positives}, {lb.false_positives}" if lb.direction else "— (no evidence)",
                      one_run, _audit_verdict(a)])
    recon_rows = [[r.track, r.defense_label, r.attack, r.seed, fmt(r.claimed_epsilon), f"{r.delta:g}",
                   f"{fmt(r.kappa)} ({'exact' if r.kappa_exact else 'estimate'})", fmt(r.allowed), fmt(r.bound),
                   r.bound_how, fmt(r.success_rate), r.n_targets, fmt(r.success_low),
                   "ABOVE THE BOUND" if r.exceeds else "within"] for r in audit.reconstruction]
    return render("audit.html.j2", membership_rows=membership_rows, membership_classes=membership_classes, recon_rows=recon_rows,
                  missing=list(audit.missing_arrays), recon_lines=[describe_reconstruction(r) for r in
                                                                   audit.reconstruction if r.exceeds])


def render_page(store: RunStore) -> str:
    """The whole page for the run directory of ``store`` (figures written under ``report/figures/``)."""
    rows = leaderboard.latest_rows(store.results())
    audit = audit_store(store, rows)
    arrays = saved_arrays(store)
    memo: dict[str, Any] = {}

    def cached(key: str) -> Any:
        if key not in memo:
            memo[key] = arrays(key)
        return memo[key]

    boards = leaderboard.build(rows, violation_findings(audit), rank_by=leaderboard.rank_by_of(store.root),
                               arrays=cached)
    figures_dir = store.root / FIGURES
    if figures_dir.exists():
        shutil.rmtree(figures_dir)  # figures of tracks no longer in the run must not linger
    figures = plots.Figures(figures_dir)
    tracks = []
    for board in boards:
        track_rows = [r for r in rows if r["track"] == board.track]
        ctx = TrackContext(board, track_rows, store, cached, figures, audit)
        flagged = {(a.defense_label, a.attack) for a in audit.violations if a.track == board.track}
        section = SECTIONS.get(board.game)
        tracks.append({"board": board_section(board, ctx, flagged),
                       "section": section(ctx) if section is not None else Markup("")})
    notes: dict[tuple[str, str], int] = {}
    for r in rows:
        for note in r.get("notes") or []:
            notes[r["track"], note] = notes.get((r["track"], note), 0) + 1
    counts = {s: sum(r["status"] == s for r in rows) for s in ("ok", "skipped", "failed")}
    scenarios = [(p.name, p.read_text(encoding="utf-8")) for p in sorted((store.root / "scenarios").glob("*.yaml"))]
    timings = [[r["track"], r["defense_label"], r["attack_label"], r["seed"], r["status"], fmt(r.get("seconds"), 2),
                r.get("trained_models", "—")] for r in rows]
    return render(
        "page.html.j2",
        name=store.root.resolve().name,
        version=arena.__version__,
        generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        n_rows=len(rows),
        counts=counts,
        violations=[f"{a.track} {a.defense_label} vs {a.attack} seed {a.seed}: {describe_violation(a)}"
                    for a in audit.violations],
        n_audited=len(audit.membership),
        tracks=tracks,
        audit=audit_section(audit),
        notes=[(t, n, c) for (t, n), c in notes.items()],
        scenarios=scenarios,
        timings=timings,
        total_seconds=sum(r.get("seconds") or 0.0 for r in rows),
        figure_files=[p.name for p in figures.written],
        figures_dir=FIGURES,
    )


def write_report(run_dir: Path | str) -> Path:
    """Write ``run_dir/report/index.html`` (and ``report/figures/``) and return the page's path."""
    store = RunStore(run_dir)
    if not store.results_path.exists():
        raise FileNotFoundError(f"{run_dir}: no results.jsonl here")
    page = render_page(store)
    store.write_text("report/index.html", page)
    path = store.root / "report" / "index.html"
    path.chmod(0o644)  # a page to be read (and served) by others, unlike the private temporary file it came from
    return path

