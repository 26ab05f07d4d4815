"""The board in the formats it is read in: a text table (``arena leaderboard``), CSV and JSON with one record per
track × defense × attack, and the interval table of one metric (the report's). Every TPR at an FPR comes with its
operating point (``grid.OperatingPoint``): in the text table a table of them, in the records the columns
``POINT_COLUMNS``."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from arena.results.leaderboard.board import TrackBoard
from arena.results.leaderboard.grid import NOT_RESOLVABLE, MetricGrid


def text_frame(like: pd.DataFrame, texts: Iterable[tuple[tuple[str, str], str]]) -> pd.DataFrame:
    """A frame of display strings shaped like ``like`` (defenses × attacks), "" but for the ``((defense, attack),
    text)`` given (a later one replacing an earlier); filled as one array, not cell by cell through ``.loc``."""
    row = {d: i for i, d in enumerate(like.index)}
    column = {a: j for j, a in enumerate(like.columns)}
    values = np.full(like.shape, "", dtype=object)
    for (d, a), text in texts:
        values[row[d], column[a]] = text
    return pd.DataFrame(values, index=like.index, columns=like.columns)


def interval_table(board: TrackBoard, metric: str | None = None) -> pd.DataFrame:
    """The interval of each mean of ``metric`` (the ranking one by default; utility first) as display strings,
    shaped like ``cells``; ``n/r`` where the metric cannot be resolved."""
    grid = board.grids.get(metric or board.metric)
    intervals = grid.intervals if grid is not None else board.intervals
    table = text_frame(board.cells, [*((cell, iv.text()) for cell, iv in intervals.items()),
                                     *((cell, NOT_RESOLVABLE) for cell in (grid.not_resolvable if grid else ()))])
    table.insert(0, "utility", [board.utility_intervals[d].text() if d in board.utility_intervals else ""
                                for d in table.index])
    return table


POINT_COLUMNS = ("thresholds", "fpr", "false_positives", "nonmembers", "operating_point")
"""The record's columns ``<metric>_<column>`` of a TPR at an FPR: the seeds' thresholds (a list, seed order; null:
none called member), the realised FPR and the false positives and non-members pooled over the seeds, and the
text ('thr 2.31, FPR 0.92 %, 6 FP / 650')."""


def operating_table(board: TrackBoard, metric: str) -> pd.DataFrame | None:
    """Each cell's operating point of ``metric`` (a TPR at an FPR) as text, shaped like ``cells``; None when no
    cell has one (a metric that is no TPR@FPR, or rows written before rows recorded them)."""
    grid = board.grids.get(metric)
    if grid is None or not grid.points:
        return None
    return text_frame(board.cells, [*((cell, point.text()) for cell, point in grid.points.items()),
                                    *((cell, NOT_RESOLVABLE) for cell in grid.not_resolvable)])


def _point_fields(g: MetricGrid, d: str, a: str) -> dict[str, Any]:
    point = g.points.get((d, a))
    if point is None:
        return {"thresholds": None, "fpr": math.nan, "false_positives": None, "nonmembers": None,
                "operating_point": ""}
    found = point.as_dict()
    return {c: found["text"] if c == "operating_point" else found[c] for c in POINT_COLUMNS}


def render_table(boards: list[TrackBoard]) -> str:
    out = []
    for b in boards:
        direction = "higher" if b.higher_is_better else "lower"
        beside = f"; {', '.join(b.beside)} beside it" if b.beside else ""
        out.append(f"== track {b.track} ({b.game}; ranked by {b.metric}, {direction} = stronger attack{beside}) ==")
        out.extend(b.warnings)
        table = b.cells.copy()
        table.insert(0, "utility", b.utility.map(lambda v: "" if np.isnan(v) else f"{v:.3f}"))
        table.insert(1, "claimed ε", [f"{b.claimed[d]:.4g}" if d in b.claimed else "" for d in table.index])
        out.append(table.to_string())
        for m in b.beside:
            out.append("")
            out.append(f"{m}:")
            out.append(b.grids[m].cells.to_string())
        out.append("")
        out.append(b.interval_method + ":")
        for m in b.shown:
            if m in b.grids:
                out.append(f"{m}:")
                out.append(interval_table(b, m).to_string())
        points = [(m, t) for m in b.grids if (t := operating_table(b, m)) is not None]
        if points:
            out.append("")
            out.append("operating points (score ≥ thr is called a member; realised FPR; false positives / non-members, "
                       "pooled over seeds):")
            for m, t in points:
                out.append(f"{m}:")
                out.append(t.to_string())
        out.append("")
        out.append(f"attacks by mean rank of {b.metric} across defenses (1 = strongest):")
        out.append(b.attack_ranking.to_string(float_format=lambda v: f"{v:.2f}"))
        out.append("")
        out.append("defenses by the worst case over attacks, with intervals simultaneous over the attacks (Bonferroni; "
                   "a shared place: the intervals cannot tell them apart); worst_attack: the highest estimate, "
                   "indistinguishable: the attacks the intervals cannot tell from it (pareto = on the front); "
                   "dominated_by: a DP baseline with at least its utility whose worst-case interval lies wholly at "
                   "or below its own:")
        out.append(b.defense_ranking.to_string(float_format=lambda v: f"{v:.3f}"))
        if b.failures:
            out.append("")
            out.append("failed matchups:")
            out.extend(f"  {f}" for f in b.failures)
        if b.violations:
            out.append("")
            out.append("DP VIOLATIONS (the attack's empirical ε lower bound exceeds the claimed ε):")
            out.extend(f"  {v}" for v in b.violations)
        out.append("")
    return "\n".join(out)


def long_rows(boards: list[TrackBoard]) -> list[dict[str, Any]]:
    """One record per track × defense × attack with every metric's mean and interval ends (``n/r`` for a mean that
    cannot be resolved), each TPR@FPR's operating point (``POINT_COLUMNS``), the ranking metric, the interval
    method, utility and claimed ε; ``defense`` and ``attack`` are labels, ``*_plugin`` and ``*_params`` the plugins
    and their full parameters."""
    out = []
    for b in boards:
        defenses, attacks = b.legend.get("defense", {}), b.legend.get("attack", {})
        for d in b.means.index:
            for a in b.means.columns:
                de, at = defenses.get(d, {}), attacks.get(a, {})
                rec: dict[str, Any] = {
                    "track": b.track, "game": b.game, "defense": d, "attack": a,
                    "defense_plugin": de.get("name"), "defense_params": de.get("params"),
                    "attack_plugin": at.get("name"), "attack_params": at.get("params"),
                    "rank_by": b.metric,
                    "seeds": max((g.seeds.get((d, a), 0) for g in b.grids.values()), default=0),
                    "interval": getattr(b.intervals.get((d, a)), "method", ""),
                    "utility": b.utility.get(d, math.nan), "claimed_epsilon": b.claimed.get(d, math.nan),
                    "cell": b.cells.loc[d, a],
                }
                for name, g in b.grids.items():
                    if (d, a) in g.not_resolvable:
                        rec[name], rec[f"{name}_low"], rec[f"{name}_high"] = NOT_RESOLVABLE, math.nan, math.nan
                        if g.points:
                            rec.update({f"{name}_{c}": v for c, v in _point_fields(g, d, a).items()})
                        continue
                    iv = g.intervals.get((d, a))
                    rec[name] = g.means.loc[d, a]
                    rec[f"{name}_low"] = math.nan if iv is None else iv.low
                    rec[f"{name}_high"] = math.nan if iv is None else iv.high
                    if g.points:  # a TPR at an FPR whose rows record operating points
                        rec.update({f"{name}_{c}": v for c, v in _point_fields(g, d, a).items()})
                out.append(rec)
    return out


def render_csv(boards: list[TrackBoard]) -> str:
    """One line per track × defense × attack; for every metric its mean, ``_low`` and ``_high`` columns, for a
    TPR@FPR with operating points its ``POINT_COLUMNS`` (the thresholds as JSON text)."""
    records = long_rows(boards)
    if not records:
        return ""
    fixed = ["track", "game", "defense", "attack", "rank_by", "seeds", "interval", "utility", "claimed_epsilon",
             "defense_plugin", "defense_params", "attack_plugin", "attack_params"]
    metrics: list[str] = []
    for b in boards:
        for m in (*b.shown, *b.grids):
            if m not in metrics:
                metrics.append(m)
    declared = {m for b in boards for m, g in b.grids.items() if g.info.declared}
    pointed = {m for b in boards for m, g in b.grids.items() if g.points}
    columns = [*fixed, *(c for m in metrics for c in (
        ((m, f"{m}_low", f"{m}_high") if m in declared else (m,))
        + (tuple(f"{m}_{c}" for c in POINT_COLUMNS) if m in pointed else ()))), "cell"]
    for rec in records:  # parameters (and thresholds) as JSON text in their cells
        for name in ("defense_params", "attack_params", *(f"{m}_thresholds" for m in pointed)):
            if name in rec:
                rec[name] = json.dumps(rec[name], sort_keys=True) if rec[name] is not None else ""
    return pd.DataFrame(records).reindex(columns=columns).to_csv(index=False)


def render_json(boards: list[TrackBoard]) -> str:
    def clean(v: Any) -> Any:
        if isinstance(v, (float, np.floating)):
            return None if np.isnan(v) else float(v)
        return v

    def cell(g: MetricGrid, d: str, a: str) -> Any:
        return NOT_RESOLVABLE if (d, a) in g.not_resolvable else clean(g.means.loc[d, a])

    out = []
    for b in boards:
        main = b.grids.get(b.metric)
        out.append({
            "track": b.track,
            "game": b.game,
            "metric": b.metric,
            "rank_by": b.metric,
            "beside": list(b.beside),
            "higher_is_better": b.higher_is_better,
            "interval_method": b.interval_method,
            "seeds": b.n_seeds,
            "warnings": b.warnings,
            "metric_info": {n: {"higher_is_better": g.info.higher_is_better,
                                "bounds": [clean(x) if math.isfinite(x) else None for x in g.info.bounds],
                                "declared": g.info.declared} for n, g in b.grids.items()},
            "cells": {d: {a: cell(main, d, a) if main else None for a in b.means.columns} for d in b.means.index},
            "intervals": {d: {a: [clean(_end(b, d, a, "low")), clean(_end(b, d, a, "high"))] for a in b.means.columns}
                          for d in b.means.index},
            "rows": [{k: clean(v) for k, v in rec.items()} for rec in long_rows([b])],
            "utility": {d: clean(v) for d, v in b.utility.items()},
            "claimed_epsilon": {d: b.claimed.get(d) for d in b.means.index},
            "operating_points": {m: {d: {a: {k: clean(v) for k, v in g.points[d, a].as_dict().items()}
                                         for a in b.means.columns if (d, a) in g.points} for d in b.means.index}
                                 for m, g in b.grids.items() if g.points},
            "attack_ranking": {a: clean(r) for a, r in b.attack_ranking["mean_rank"].items()},
            "defense_ranking": [
                {"defense": d, **{k: clean(v) for k, v in rec.items()}}
                for d, rec in b.defense_ranking.to_dict(orient="index").items()
            ],
            "failures": b.failures,
            "violations": b.violations,
        })
    return json.dumps(out, indent=2, default=lambda o: bool(o) if isinstance(o, np.bool_) else str(o))


def _end(board: TrackBoard, defense: str, attack: str, end: str) -> float:
    interval = board.intervals.get((defense, attack))
    return math.nan if interval is None else getattr(interval, end)
