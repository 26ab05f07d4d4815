"""``RUN_DIR/report/index.html``: one self-contained page (figures embedded as PNG, no scripts), rendered from the
Jinja2 templates in ``arena/results/report/templates/`` with autoescape on; on request
(``arena report --formats svg,pdf``) every figure is also written as SVG and PDF (TrueType fonts,
``arena.results.figures``) under ``RUN_DIR/report/figures/``.

A table of contents first, then collapsible sections (``<details>``, each with its heading as summary and an id
the contents link to): DP violations (if any); per track the leaderboard (ranking metric, legend of labels, the
metrics beside it), heatmaps, privacy-utility panels, intervals and rankings (the last two closed), then the
track's game section (the registered game's ``report_view``, rendered from the game's own templates); the DP audit
(each game's ``audit_view``); notes; the scenarios as run and per-matchup timings (closed). The core page template
names no game. Each matchup's arrays are read once for its track's figures and let go after it (``TrackArrays``); the
intervals come from the bootstrap draws saved when each matchup was scored. A track with many cells gets summarised
figures (``arena.results.report.plots``: the strongest attacks' panels, a heatmap without a number in each cell)
beside tables that read every cell.
"""

from __future__ import annotations

import shutil
from collections.abc import Collection, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd
from markupsafe import Markup

from arena._version import __version__
from arena.contracts.arrays import ArrayLoader
from arena.pipeline import labels
from arena.pipeline.store import RunStore
from arena.results import leaderboard
from arena.results.audit import Audit, audit_rows, game_part, saved_arrays, violation_findings
from arena.results.games import run_games
from arena.results.kept import kept_audit
from arena.results.leaderboard import TrackBoard
from arena.results.report import plots
from arena.results.report.context import Page, TrackContext, fmt, render, template_dirs

FIGURES = "report/figures"


def _frame_rows(df, index_name: str) -> tuple[list[str], list[list[str]]]:  # noqa: ANN001 - a DataFrame
    """A DataFrame as headers and formatted cells."""
    headers = [index_name, *map(str, df.columns)]
    body = [[str(idx), *(fmt(v) for v in df.loc[idx].tolist())] for idx in df.index]
    return headers, body


def with_points(board: TrackBoard, metric: str, cells):  # noqa: ANN001, ANN201 - a DataFrame of display strings
    """``cells`` of ``metric`` with each cell's operating point after its number, where it has one (a TPR at an
    FPR): '0.068 (n=1) (thr 2.31, FPR 0.92 %, 6 FP / 650)', any FAILED or VIOLATION mark after it."""
    grid = board.grids.get(metric)
    if grid is None or not grid.points:
        return cells
    row = {d: i for i, d in enumerate(cells.index)}
    column = {a: j for j, a in enumerate(cells.columns)}
    values = cells.to_numpy(dtype=object, copy=True)  # one array, not cell by cell through ``.loc``
    for (d, a), point in grid.points.items():
        base, full = str(grid.cells.at[d, a]), str(values[row[d], column[a]])
        if base and full.startswith(base):
            values[row[d], column[a]] = f"{base} ({point.text()}){full[len(base):]}"
    return pd.DataFrame(values, index=cells.index, columns=cells.columns)


def board_section(board: TrackBoard, ctx: TrackContext, flagged: set[tuple[str, str]]) -> Markup:
    """One track's leaderboard: tables (each TPR at an FPR with its operating point), heatmaps (or the number, for
    a single cell) and privacy-utility curves."""
    cells = with_points(board, board.metric, board.cells).copy()  # a copy: ``utility`` is inserted below
    cells.insert(0, "utility", [fmt(u) for u in board.utility])
    main = (["defense", *map(str, cells.columns)], [[d, *map(str, rec)] for d, rec in zip(cells.index, cells.values)])
    beside = []
    for m in board.beside:
        grid = board.grids[m]
        shown = with_points(board, m, grid.cells)
        beside.append((m, (["defense", *map(str, shown.columns)],
                           [[d, *map(str, rec)] for d, rec in zip(shown.index, shown.values)])))
    intervals = []
    for m in board.shown:
        if m in board.grids:
            table = leaderboard.interval_table(board, m)
            intervals.append((m, (["defense", *map(str, table.columns)],
                                  [[d, *map(str, rec)] for d, rec in zip(table.index, table.values)])))
    heatmaps, single = [], []
    for m in board.shown:
        if m not in board.grids:
            continue
        grid = board.grids[m]
        if grid.means.size <= 1:  # one defense, one attack: the number says it all
            d, a = grid.means.index[0], grid.means.columns[0]
            single.append((m, grid.cells.loc[d, a], grid.intervals.get((d, a))))
            continue
        png = ctx.figures.save(plots.heatmap(board, m, flagged), f"{board.track}-heatmap-{m}")
        heatmaps.append((m, png))
    pu = ctx.figures.save(plots.privacy_utility(board, ctx.rows), f"{board.track}-privacy-utility")
    return render(
        "board.html.j2", board=board, anchor=ctx.anchor, main=main, beside=beside, intervals=intervals,
        heatmaps=heatmaps,
        single=single, privacy_utility=pu, legend=labels.legend(ctx.rows),
        attack_ranking=_frame_rows(board.attack_ranking, "attack"),
        defense_ranking=_frame_rows(board.defense_ranking, "defense"),
    )


def audit_section(audit: Audit, games: Mapping[str, Any]) -> Markup:
    """The DP audit: each registered game's part (its ``audit_view``), in the order of their names."""
    views = {name: game_part(game, "audit_view") for name, game in sorted(games.items())}
    parts = [Markup(view(audit.games.get(name), Page(template_dirs(games[name]))))
             for name, view in views.items() if view is not None]
    return render("audit.html.j2", parts=[p for p in parts if p])


class TrackArrays:
    """Each matchup's saved arrays, read once for every figure of the track being drawn (``track``), then let go:
    the page holds one track's arrays at a time, not the run's."""

    def __init__(self, arrays: ArrayLoader) -> None:
        self.arrays = arrays
        self.memo: dict[str, Any] = {}

    def __call__(self, key: str) -> Any:
        if key not in self.memo:
            self.memo[key] = self.arrays(key)
        return self.memo[key]

    def track(self) -> TrackArrays:
        """Forget the arrays read so far (the next track's figures read their own)."""
        self.memo.clear()
        return self


def render_page(store: RunStore, formats: Collection[str] = ()) -> str:
    """The whole page for the run directory of ``store`` (its figures also written under ``report/figures/`` in the
    vector ``formats`` asked for, ``plots.VECTOR``)."""
    rows = leaderboard.latest_rows(store.current_rows())  # the scenario as run: superseded rows are history
    games = run_games(rows)  # the games the run played, from their rows (the plugins only for a third-party one)
    cached = TrackArrays(saved_arrays(store))
    audit = kept_audit(store.root, rows, lambda: audit_rows(rows, cached, games))
    findings = violation_findings(audit)
    boards = leaderboard.build(rows, findings, rank_by=leaderboard.rank_by_of(store.root), arrays=cached.track(),
                               draws=store.load_draws)
    figures_dir = store.root / FIGURES
    figures = plots.Figures(figures_dir, formats)
    if figures_dir.exists():
        shutil.rmtree(figures_dir)  # figures of tracks no longer in the run must not linger
    by_track: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_track.setdefault(r["track"], []).append(r)
    tracks = []
    for board in boards:
        track_rows = by_track[board.track]
        game = games.get(board.game)
        view = None if game is None else game_part(game, "report_view")
        ctx = TrackContext(board, track_rows, store, cached.track(), figures, audit, templates=template_dirs(game))
        flagged = {(a.defense_label, a.attack) for a in audit.violations if a.track == board.track}
        section = Markup(view(ctx)) if view is not None else Markup("")
        parts = [*((f"heatmap-{i}", f"heatmap {m}") for i, m in enumerate(
                    (m for m in board.shown if m in board.grids and board.grids[m].means.size > 1), start=1)),
                 ("privacy-utility", "privacy-utility"), ("intervals", "intervals"), ("rankings", "rankings"),
                 *((("game", f"{board.game} figures"),) if section else ())]
        tracks.append({"board": board_section(board, ctx, flagged), "section": section, "name": board.track,
                       "game": board.game, "anchor": ctx.anchor, "parts": parts})
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
        version=__version__,
        generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        n_rows=len(rows),
        counts=counts,
        violations=[f"{a.track} {a.defense_label} vs {a.attack} seed {a.seed}: {findings[a.key]}"
                    for a in audit.violations],
        n_audited=audit.tested,
        tracks=tracks,
        audit=audit_section(audit, games),
        notes=[(t, n, c) for (t, n), c in notes.items()],
        scenarios=scenarios,
        timings=timings,
        total_seconds=sum(r.get("seconds") or 0.0 for r in rows),
        figure_files=[p.name for p in figures.written],
        formats=" and ".join(f.upper() for f in figures.formats),
        figures_dir=FIGURES,
    )


def write_report(run_dir: Path | str, formats: Collection[str] = ()) -> Path:
    """Write ``run_dir/report/index.html`` (and, for vector ``formats``, ``report/figures/``) and return the page's
    path."""
    store = RunStore(run_dir)
    if not store.results_path.exists():
        raise FileNotFoundError(f"{run_dir}: no results.jsonl here")
    page = render_page(store, formats)
    store.write_text("report/index.html", page)
    path = store.root / "report" / "index.html"
    path.chmod(0o644)  # a page to be read (and served) by others, unlike the private temporary file it came from
    return path

