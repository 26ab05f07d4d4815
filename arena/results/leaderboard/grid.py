"""One metric over a track's defense × attack grid: each cell's mean ± sd over ok seeds, its interval (binomial over
the pooled trials for a proportion that declares them), or ``n/r`` where the sample cannot resolve the metric (a
value the game left null, or a TPR at an FPR finer than 1/n_nonmembers), and for a TPR at an FPR the operating point
behind each seed's value (the row's ``operating_points``), pooled over the seeds (``OperatingPoint``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from arena.contracts.metric import fpr_level, nonmembers_key
from arena.results.leaderboard.intervals import CONFIDENCE, MIN_T_SEEDS, Interval, cell_interval, mean_std
from arena.results.leaderboard.resample import Resampler
from arena.results.leaderboard.rows import MetricInfo, resolvable

NOT_RESOLVABLE = "n/r"

Groups = dict[tuple[str, str], list[dict[str, Any]]]
"""(defense label, attack label) → the rows of that cell, one per seed."""


@dataclass(frozen=True)
class OperatingPoint:
    """The operating points behind a cell's TPR at an FPR, one per seed (``thresholds`` in seed order; None: that
    seed called no point a member), the counts pooled over the seeds: ``fpr`` is ``false_positives /
    nonmembers`` (the realised FPR of the pooled cuts, the mean of the seeds' FPRs when they have equal counts)."""

    thresholds: tuple[float | None, ...]
    false_positives: int
    nonmembers: int
    true_positives: int
    members: int

    @property
    def fpr(self) -> float:
        return self.false_positives / self.nonmembers if self.nonmembers else math.nan

    @classmethod
    def pooled(cls, points: Sequence[Mapping[str, Any]]) -> OperatingPoint:
        return cls(tuple(None if p.get("threshold") is None else float(p["threshold"]) for p in points),
                   *(sum(int(p[k]) for p in points)
                     for k in ("false_positives", "nonmembers", "true_positives", "members")))

    def text(self) -> str:
        """'thr 2.31, FPR 0.92 %, 6 FP / 650' (several seeds: the thresholds' range, the counts pooled)."""
        known = [t for t in self.thresholds if t is not None]
        if not known:
            thr = "none called member"
        elif len(set(known)) == 1:
            thr = f"thr {known[0]:.4g}"
        else:
            thr = f"thr {min(known):.4g}–{max(known):.4g}"
        if known and len(known) < len(self.thresholds):
            thr += f" ({len(self.thresholds) - len(known)} seed(s) none)"
        seeds = f" over {len(self.thresholds)} seeds" if len(self.thresholds) > 1 else ""
        return f"{thr}, FPR {100 * self.fpr:.2f} %, {self.false_positives} FP / {self.nonmembers}{seeds}"

    def as_dict(self) -> dict[str, Any]:
        """The frame's form: ``thresholds`` (a list, per seed), ``fpr``, the pooled counts, ``text``."""
        return {"thresholds": list(self.thresholds), "fpr": self.fpr, "false_positives": self.false_positives,
                "nonmembers": self.nonmembers, "true_positives": self.true_positives, "members": self.members,
                "text": self.text()}


@dataclass
class MetricGrid:
    """One metric over a track's defense × attack grid."""

    info: MetricInfo
    means: pd.DataFrame  # NaN where no ok seed or not resolvable
    cells: pd.DataFrame  # "mean ± sd (n=k)", "mean (n=1)", "n/r" or ""
    intervals: dict[tuple[str, str], Interval] = field(default_factory=dict)
    not_resolvable: set[tuple[str, str]] = field(default_factory=set)
    seeds: dict[tuple[str, str], int] = field(default_factory=dict)
    points: dict[tuple[str, str], OperatingPoint] = field(default_factory=dict)
    """For a TPR at an FPR: each cell's operating point, where every ok seed's row records one (rows of schema 4)."""

    def with_point(self, defense: str, attack: str, text: str) -> str:
        """``text`` (a cell's) followed by its operating point in parentheses, where it has one."""
        point = self.points.get((defense, attack))
        return f"{text} ({point.text()})" if point is not None and text else text

    @classmethod
    def empty(cls, info: MetricInfo, defenses: list[str], attacks: list[str]) -> MetricGrid:
        return cls(info, pd.DataFrame(np.nan, index=defenses, columns=attacks),
                   pd.DataFrame("", index=defenses, columns=attacks))


def metric_grid(info: MetricInfo, groups: Groups, defenses: list[str], attacks: list[str],
                resampler: Resampler | None, confidence: float = CONFIDENCE) -> MetricGrid:
    """The grid of ``info.name``; each cell's interval at ``confidence`` by ``intervals.cell_interval``: t over
    seeds from ``MIN_T_SEEDS`` seeds on, else bootstrapped by ``resampler`` where every seed's draws hold the
    metric, else none."""
    name = info.name
    grid = MetricGrid.empty(info, defenses, attacks)
    row, column = {d: i for i, d in enumerate(defenses)}, {a: j for j, a in enumerate(attacks)}
    means, cells = grid.means.to_numpy(copy=True), grid.cells.to_numpy(copy=True)  # filled here, framed once
    for (d, a), group in groups.items():
        ok = [r for r in group if r["status"] == "ok" and name in (r.get("metrics") or {})]
        if not ok:
            continue
        values = [r["metrics"][name] for r in ok]
        if any(v is None or not resolvable(name, r["metrics"].get(nonmembers_key(name))) for v, r in zip(values, ok)):
            grid.not_resolvable.add((d, a))
            cells[row[d], column[a]] = NOT_RESOLVABLE
            continue
        values = [float(v) for v in values]
        mu, sd = mean_std(values)
        means[row[d], column[a]] = mu
        spread = f" ± {sd:.3f}" if len(values) > 1 else ""  # one seed has no sample std: no "± 0.000"
        cells[row[d], column[a]] = f"{mu:.3f}{spread} (n={len(values)})"
        grid.seeds[d, a] = len(values)
        trials = _trials(info, ok)
        draws = (resampler.of(name, ok) if resampler is not None and len(values) < MIN_T_SEEDS and trials is None
                 else None)
        grid.intervals[d, a] = cell_interval(values, draws, info.bounds, trials, confidence)
        points = [(r.get("operating_points") or {}).get(name) for r in sorted(ok, key=lambda r: r["seed"])]
        if fpr_level(name) is not None and all(isinstance(p, Mapping) for p in points):
            grid.points[d, a] = OperatingPoint.pooled(points)  # type: ignore[arg-type]  # all mappings
    grid.means = pd.DataFrame(means, index=grid.means.index, columns=grid.means.columns)
    grid.cells = pd.DataFrame(cells, index=grid.cells.index, columns=grid.cells.columns)
    return grid


def _trials(info: MetricInfo, rows: list[dict[str, Any]]) -> list[int] | None:
    """Each row's number of trials of a proportion (``info.trials``), or None unless the metric declares them and
    every row records a positive whole number."""
    if info.trials is None:
        return None
    counts = [r["metrics"].get(info.trials) for r in rows]
    if all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in counts):
        return counts
    return None


def unresolvable_warnings(track: str, grids: dict[str, MetricGrid], groups: Groups) -> list[str]:
    """One note per TPR@FPR metric with cells the non-members cannot resolve, naming the finest FPR they can (a
    property of the game's size, not a fault: a warning is kept for a ranking metric no cell resolves)."""
    warnings = []
    for n, grid in grids.items():
        if grid.not_resolvable and fpr_level(n) is not None:
            counts = sorted({r["metrics"].get(nonmembers_key(n)) for (d, a) in grid.not_resolvable
                             for r in groups[d, a] if r["status"] == "ok" and r["metrics"].get(nonmembers_key(n))})
            fewest = min(counts) if counts else None
            resolution = f"{fewest} non-members resolve FPR only to {1 / fewest:.2%}" if fewest else \
                "too few non-members"
            warnings.append(f"note: {track}: {n} cannot be resolved in {len(grid.not_resolvable)} cell(s): "
                            f"{resolution} (1/n_nonmembers > FPR); shown as {NOT_RESOLVABLE}")
    return warnings
