"""``RUN_DIR/report/index.html``: one self-contained page (figures embedded as base64 PNG, no scripts).

Sections: DP violations (if any), per track the leaderboard tables, heatmap, privacy-utility curves and ROC
curves, the DP audit, reconstruction grids, notes, the scenarios as run and per-matchup timings. Every string
that comes from a plugin, a scenario or a result row is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import arena
from arena import leaderboard
from arena.audit import Audit, audit_store, describe_violation, saved_arrays, violation_findings
from arena.leaderboard import TrackBoard
from arena.report import plots
from arena.report.grids import GRID_FILE
from arena.store import RunStore

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1500px; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 0.6em 0 1.2em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
td.violation, tr.violation td { background: #ffd9d9; font-weight: bold; }
.banner { border: 2px solid #c00; background: #fff0f0; padding: 0.6em 1em; margin: 1em 0; }
.ok { border: 2px solid #2a2; background: #f0fff0; padding: 0.6em 1em; margin: 1em 0; }
img { max-width: 100%; display: block; margin: 0.5em 0 1.5em; }
pre { background: #f7f7f7; padding: 0.8em; overflow-x: auto; }
figure { display: inline-block; margin: 0.5em 1em 0.5em 0; }
figcaption { font-size: 0.85em; max-width: 420px; }
.muted { color: #666; font-size: 0.9em; }
"""


def esc(value: object) -> str:
    """Any value as HTML text, escaped (quotes included)."""
    return html.escape(str(value), quote=True)


def fmt(value: object, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (float, np.floating)):
        return "—" if math.isnan(value) else f"{value:.{digits}f}"
    return str(value)


def table(headers: Iterable[object], rows: Iterable[Iterable[object]], row_classes: Iterable[str] = ()) -> str:
    """An HTML table; every header and cell is escaped. A cell mentioning VIOLATION is highlighted."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    classes = list(row_classes)
    for i, row in enumerate(rows):
        cells = "".join(
            f'<td class="violation">{esc(c)}</td>' if "VIOLATION" in str(c) else f"<td>{esc(c)}</td>" for c in row
        )
        cls = f' class="{esc(classes[i])}"' if i < len(classes) and classes[i] else ""
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def frame(df: pd.DataFrame, index_name: str) -> str:
    """A DataFrame as an escaped table, each column formatted by its own type."""
    columns = [df[c].tolist() for c in df.columns]
    body = ([idx, *(fmt(col[i]) for col in columns)] for i, idx in enumerate(df.index))
    return table([index_name, *df.columns], body)


def image(data: bytes, alt: str) -> str:
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode("ascii")}">'


def board_section(board: TrackBoard, rows: list[dict[str, Any]], store: RunStore, audit: Audit) -> str:
    """One track: tables, heatmap, privacy-utility curves and (membership) ROC curves."""
    direction = "higher" if board.higher_is_better else "lower"
    parts = [f"<h2>Track {esc(board.track)}</h2>",
             (f"<p>Game: {esc(board.game)}; primary metric: {esc(board.metric)} ({direction} = stronger attack). "
              "Cells: mean ± standard deviation over seeds (n seeds).</p>")]
    cells = board.cells.copy()
    cells.insert(0, "utility", [fmt(u) for u in board.utility])
    parts.append(table(["defense", *cells.columns], ([d, *rec] for d, rec in zip(cells.index, cells.values))))
    intervals = leaderboard.interval_table(board)
    parts.append("<h3>95% t-intervals of the means over seeds</h3>")
    parts.append(table(["defense", *intervals.columns],
                       ([d, *rec] for d, rec in zip(intervals.index, intervals.values))))
    parts.append("<h3>Attacks by mean rank across defenses (1 = strongest; equal means share a place)</h3>")
    parts.append(frame(board.attack_ranking, "attack"))
    parts.append("<h3>Defenses: utility against the worst-case attack score (pareto = on the front)</h3>")
    parts.append(frame(board.defense_ranking, "defense"))
    if board.failures:
        parts.append("<h3>Failed matchups</h3><ul>" + "".join(f"<li>{esc(f)}</li>" for f in board.failures) + "</ul>")
    if board.violations:
        parts.append('<div class="banner"><b>DP violations</b><ul>'
                     + "".join(f"<li>{esc(v)}</li>" for v in board.violations) + "</ul></div>")
    flagged = {(a.defense_label, a.attack) for a in audit.violations if a.track == board.track}
    parts.append(f"<h3>Heatmap: {esc(board.metric)}</h3>")
    parts.append(image(plots.heatmap(board, flagged), f"heatmap of {board.metric} for track {board.track}"))
    parts.append("<h3>Privacy-utility trade-off</h3>")
    parts.append(image(plots.privacy_utility(board, rows), f"privacy-utility curves for track {board.track}"))
    if board.game == "membership":
        roc = plots.roc_curves(board, rows, saved_arrays(store))
        parts.append("<h3>ROC curves (log-log; mean over seeds)</h3>")
        parts.append(image(roc, f"ROC curves for track {board.track}") if roc else
                     "<p class='muted'>No saved attack scores for this track.</p>")
    return "\n".join(parts)


def audit_section(audit: Audit) -> str:
    """Every matchup against a defense that claims (ε, δ): bounds the claim implies beside what was measured."""
    parts = ["<h2>DP audit</h2>",
             ("<p>For each membership matchup against a defense claiming (ε, δ): the advantage bound "
              "(e<sup>ε</sup>−1)/(e<sup>ε</sup>+1)+δ, the TPR bound e<sup>ε</sup>·FPR+δ at each reported FPR, "
              "and an empirical lower bound on ε from the attack's ROC with 95% Clopper–Pearson intervals on TPR "
              "and FPR (max over thresholds of log((TPR<sub>low</sub>−δ)/FPR<sub>high</sub>) and "
              "log((TNR<sub>low</sub>−δ)/FNR<sub>high</sub>), where TNR<sub>low</sub> = 1−FPR<sub>high</sub> and "
              "FNR<sub>high</sub> = 1−TPR<sub>low</sub>). A lower bound above the claimed ε is a violation. "
              "The intervals hold per threshold, and members and non-members stand for the two neighbouring "
              "datasets.</p>")]
    if audit.membership:
        headers = ["track", "defense", "attack", "seed", "claimed ε", "δ", "members + non-members", "empirical ε ≥",
                   "flagged there (members, non-members)", "advantage", "advantage bound",
                   "TPR@FPR (measured ≤ bound)", "verdict"]
        body, classes = [], []
        for a in audit.membership:
            lb = a.lower_bound
            tprs = "; ".join(f"{level:.1%}: {fmt(m)} ≤ {b:.3f}" for level, m, b in a.tpr_at_fpr)
            flagged = f"{lb.true_positives}, {lb.false_positives}" if lb.direction else "— (no evidence)"
            body.append([a.track, a.defense_label, a.attack, a.seed, fmt(a.claimed_epsilon), f"{a.delta:g}",
                         f"{lb.n_members} + {lb.n_nonmembers}", fmt(lb.epsilon), flagged, fmt(a.advantage),
                         fmt(a.advantage_bound), tprs, "VIOLATION" if a.violation else "consistent"])
            classes.append("violation" if a.violation else "")
        parts.append(table(headers, body, classes))
    else:
        parts.append("<p class='muted'>No membership matchup against a defense that claims (ε, δ).</p>")
    if audit.missing_arrays:
        parts.append("<p>Not audited (saved scores missing): " + esc(", ".join(audit.missing_arrays)) + "</p>")
    if audit.reconstruction:
        parts.append("<h3>Reconstruction: success the guarantee allows, e<sup>ε</sup>·κ+δ</h3>")
        body = [[r.track, r.defense_label, r.attack, r.seed, fmt(r.claimed_epsilon), f"{r.delta:g}", fmt(r.kappa),
                 fmt(r.allowed), fmt(r.success_rate), r.n_targets, fmt(r.success_low),
                 "above the bound" if r.exceeds else "within"] for r in audit.reconstruction]
        parts.append(table(["track", "defense", "attack", "seed", "claimed ε", "δ", "κ", "allowed success",
                            "measured success", "targets", "95% low end", "verdict"], body))
    return "\n".join(parts)


def grids_section(rows: list[dict[str, Any]], store: RunStore) -> str:
    """The reconstruction grids saved beside each reconstruction matchup's artifacts, where present."""
    figures = []
    for r in rows:
        path = store.artifact_dir(r["key"]) / GRID_FILE
        if r.get("game") != "reconstruction" or not path.is_file():
            continue
        rate = (r.get("metrics") or {}).get("success_rate")
        caption = f"{r['track']}: {r['defense_label']} vs {r['attack']}, seed {r['seed']}; success rate {fmt(rate)}"
        figures.append(f"<figure>{image(path.read_bytes(), caption)}<figcaption>{esc(caption)}</figcaption></figure>")
    if not figures:
        return ""
    return "<h2>Reconstruction grids</h2>\n" + "\n".join(figures)


def notes_section(rows: list[dict[str, Any]]) -> str:
    """Each distinct note of the attacks and games once per track (sample-size caveats and the like)."""
    seen: dict[tuple[str, str], int] = {}
    for r in rows:
        for note in r.get("notes") or []:
            seen[r["track"], note] = seen.get((r["track"], note), 0) + 1
    if not seen:
        return ""
    return "<h2>Notes</h2>" + table(["track", "note", "matchups"], ([t, n, c] for (t, n), c in seen.items()))


def scenarios_section(store: RunStore) -> str:
    files = sorted((store.root / "scenarios").glob("*.yaml"))
    parts = ["<h2>Scenario as run</h2>"]
    for path in files:
        parts.append(f"<h3>{esc(path.name)}</h3><pre>{esc(path.read_text(encoding='utf-8'))}</pre>")
    if not files:
        parts.append("<p class='muted'>No scenario files in this run directory.</p>")
    return "\n".join(parts)


def timings_section(rows: list[dict[str, Any]]) -> str:
    total = sum(r.get("seconds") or 0.0 for r in rows)
    body = [[r["track"], r["defense_label"], r["attack_label"], r["seed"], r["status"], fmt(r.get("seconds"), 2),
             r.get("trained_models", "—")] for r in rows]
    return (f"<h2>Timings</h2><p>{len(rows)} matchups, {total:.1f} s of matchup time in all "
            "(wall time is lower when matchups run in parallel).</p>"
            + table(["track", "defense", "attack", "seed", "status", "seconds", "models trained"], body))


def render(store: RunStore) -> str:
    """The whole page for the run directory of ``store``."""
    rows = leaderboard.latest_rows(store.results())
    audit = audit_store(store, rows)
    boards = leaderboard.build(rows, violation_findings(audit))
    counts = {s: sum(r["status"] == s for r in rows) for s in ("ok", "skipped", "failed")}
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts = [f"<h1>privacy-arena report: {esc(store.root.resolve().name)}</h1>",
             (f"<p class='muted'>privacy-arena {esc(arena.__version__)}; generated {generated}; {len(rows)} "
              f"matchups: {counts['ok']} ok, {counts['skipped']} skipped, {counts['failed']} failed.</p>")]
    if audit.violations:
        parts.append('<div class="banner"><b>DP violations: a defense leaks more than it claims</b><ul>'
                     + "".join(f"<li>{esc(f'{a.track} {a.defense_label} vs {a.attack} seed {a.seed}: ')}"
                               f"{esc(describe_violation(a))}</li>" for a in audit.violations)
                     + "</ul></div>")
    elif audit.membership:
        parts.append(f'<div class="ok">DP audit: {len(audit.membership)} membership matchups against claimed '
                     "(ε, δ); no empirical lower bound exceeds its claim.</div>")
    for board in boards:
        track_rows = [r for r in rows if r["track"] == board.track]
        parts.append(board_section(board, track_rows, store, audit))
    parts.append(audit_section(audit))
    parts.append(grids_section(rows, store))
    parts.append(notes_section(rows))
    parts.append(scenarios_section(store))
    parts.append(timings_section(rows))
    body = "\n".join(p for p in parts if p)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>privacy-arena report: {esc(store.root.resolve().name)}</title>"
            f"<style>{STYLE}</style></head><body>\n{body}\n</body></html>\n")


def write_report(run_dir: Path | str) -> Path:
    """Write ``run_dir/report/index.html`` and return its path."""
    store = RunStore(run_dir)
    if not store.results_path.exists():
        raise FileNotFoundError(f"{run_dir}: no results.jsonl here")
    page = render(store)
    store.write_text("report/index.html", page)
    path = store.root / "report" / "index.html"
    path.chmod(0o644)  # a page to be read (and served) by others, unlike the private temporary file it came from
    return path
