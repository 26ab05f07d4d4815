"""The leaderboard: per track, the defense × attack table of the primary metric, and two rankings.

Cells show the mean ± standard deviation over seeds; beside them, the 95% t-interval of each mean. Matchups the
DP audit flags are marked VIOLATION.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import rankdata, t

from arena.metrics import PRIMARY_METRIC, UNIT
from arena.plugins import registries


BOARD_COLUMNS = frozenset({"key", "status", "track", "game", "defense", "defense_label", "attack_label", "seed"})
"""What a row needs to appear on a board; the store already set aside lines that are not rows at all."""


def latest_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last row written for each matchup key (a re-run replaces an earlier failure); rows lacking a board's
    columns are left out."""
    by_key: dict[str, dict[str, Any]] = {}
    for row in rows:
        if BOARD_COLUMNS <= row.keys():
            by_key[row["key"]] = row
    return list(by_key.values())


@dataclass(frozen=True)
class Interval:
    """A mean over seeds and its two-sided 95% t-interval (NaN ends for a single seed)."""

    mean: float
    low: float
    high: float
    n: int

    def text(self) -> str:
        """'[low, high]', or why there is none."""
        return "one seed: no interval" if self.n < 2 else f"[{self.low:.3f}, {self.high:.3f}]"


def mean_std(values: list[float]) -> tuple[float, float]:
    arr = np.asarray(values, dtype=np.float64)
    return float(arr.mean()), float(arr.std(ddof=1)) if len(arr) > 1 else 0.0


def mean_interval(
    values: list[float], bounds: tuple[float, float] = (-math.inf, math.inf), confidence: float = 0.95
) -> Interval:
    """Mean of ``values`` with the Student-t interval of the mean (the seeds are the sample), cut to ``bounds``.

    Few seeds give wide intervals; the part outside the metric's range (an AUC below 0, say) is impossible.
    """
    arr = np.asarray(values, dtype=np.float64)
    mean = float(arr.mean())
    if len(arr) < 2:
        return Interval(mean, math.nan, math.nan, len(arr))
    half = float(t.ppf((1 + confidence) / 2, len(arr) - 1) * arr.std(ddof=1) / math.sqrt(len(arr)))
    low, high = bounds
    return Interval(mean, max(mean - half, low), min(mean + half, high), len(arr))


@dataclass(frozen=True)
class TrackBoard:
    """One track's results: cells of the primary metric and the two rankings."""

    track: str
    game: str
    metric: str
    higher_is_better: bool
    cells: pd.DataFrame  # rows: defense label, columns: attack; values: display strings
    means: pd.DataFrame  # same shape, numeric means (NaN where no ok seed)
    utility: pd.Series  # defense label -> mean utility
    attack_ranking: pd.DataFrame
    defense_ranking: pd.DataFrame
    failures: list[str]
    intervals: dict[tuple[str, str], Interval] = field(default_factory=dict)  # (defense, attack) -> over seeds
    utility_intervals: dict[str, Interval] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)  # DP audit findings, one line per matchup
    claimed: dict[str, float] = field(default_factory=dict)  # defense label -> largest ε its releases claimed


def _defense_order(rows: list[dict[str, Any]]) -> list[str]:
    seen: dict[str, tuple] = {}
    for r in rows:
        eps = r.get("epsilon")
        seen.setdefault(r["defense_label"], (r["defense"] != "nonprivate", -(eps or math.inf), r["defense_label"]))
    return sorted(seen, key=lambda label: seen[label])


def claimed_epsilons(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The largest ε each defense configuration's releases claimed (a reader compares it with the label's)."""
    claimed: dict[str, float] = {}
    for r in rows:
        eps = (r.get("claim") or {}).get("epsilon")
        if isinstance(eps, (int, float)) and not isinstance(eps, bool):
            claimed[r["defense_label"]] = max(claimed.get(r["defense_label"], -math.inf), float(eps))
    return claimed


def track_board(track: str, rows: list[dict[str, Any]], violations: Mapping[str, str] | None = None) -> TrackBoard:
    """One track's board; ``violations`` maps matchup keys the DP audit flags to a one-line finding."""
    violations = violations or {}
    game = rows[0]["game"]
    metric = PRIMARY_METRIC[game]
    declared = registries().metrics.get(metric)
    higher = declared.higher_is_better
    defenses = _defense_order(rows)
    attacks = sorted({r["attack_label"] for r in rows})
    cells = pd.DataFrame("", index=defenses, columns=attacks)
    means = pd.DataFrame(np.nan, index=defenses, columns=attacks)
    failures, flagged = [], []
    intervals: dict[tuple[str, str], Interval] = {}
    for d in defenses:
        for a in attacks:
            group = [r for r in rows if r["defense_label"] == d and r["attack_label"] == a]
            ok = [r["metrics"][metric] for r in group if r["status"] == "ok" and r["metrics"].get(metric) is not None]
            bad = [r for r in group if r["status"] == "failed"]
            skipped = [r for r in group if r["status"] == "skipped"]
            text = ""
            if ok:
                mu, sd = mean_std(ok)
                means.loc[d, a] = mu
                intervals[d, a] = mean_interval(ok, declared.bounds)
                text = f"{mu:.3f} ± {sd:.3f} (n={len(ok)})"
            if bad:
                text = (text + " " if text else "") + f"FAILED×{len(bad)}"
                failures.extend(f"{track} {d} vs {a} seed {r['seed']}: {r['error']}" for r in bad)
            if skipped and not ok and not bad:
                text = "skipped"
            hits = [r for r in group if r["key"] in violations]
            if hits:
                text += f" VIOLATION×{len(hits)}"
                flagged.extend(f"{track} {d} vs {a} seed {r['seed']}: {violations[r['key']]}" for r in hits)
            cells.loc[d, a] = text
    utility_intervals = {}
    for d in defenses:
        per_seed = {r["seed"]: r["utility"] for r in rows if r["defense_label"] == d and r.get("utility") is not None}
        if per_seed:
            utility_intervals[d] = mean_interval(list(per_seed.values()), UNIT)
    utility = pd.Series({d: utility_intervals[d].mean if d in utility_intervals else np.nan for d in defenses})
    # Attacks: rank within each defense (1 = strongest), ties share the average rank.
    ranks = {}
    for d in defenses:
        row = means.loc[d].dropna()
        if len(row):
            scores = -row.values if higher else row.values
            ranks[d] = pd.Series(rankdata(scores, method="average"), index=row.index)
    rank_frame = pd.DataFrame(ranks).T
    attack_ranking = pd.DataFrame(
        {"mean_rank": rank_frame.mean(), "defenses": rank_frame.count()}
    ).sort_values("mean_rank") if len(rank_frame) else pd.DataFrame(columns=["mean_rank", "defenses"])
    # Equal mean ranks are a tie and share the better place.
    attack_ranking.insert(0, "place", rankdata(attack_ranking["mean_rank"], method="min").astype(int))
    # Defenses: utility against the worst case over attacks (for the defender).
    worst = means.max(axis=1) if higher else means.min(axis=1)
    defense_ranking = pd.DataFrame({"utility": utility, f"worst_{metric}": worst})
    defense_ranking["pareto"] = [
        _on_front(d, defense_ranking, f"worst_{metric}", higher) for d in defense_ranking.index
    ]
    leak = defense_ranking[f"worst_{metric}"] * (1 if higher else -1)
    order = defense_ranking.assign(_leak=leak).sort_values(["_leak", "utility"], ascending=[True, False]).index
    defense_ranking = defense_ranking.loc[order]
    return TrackBoard(track, game, metric, higher, cells, means, utility, attack_ranking, defense_ranking, failures,
                      intervals, utility_intervals, flagged, claimed_epsilons(rows))


def _on_front(d: str, frame: pd.DataFrame, worst_col: str, higher: bool) -> bool:
    """No other defense is at least as useful and at most as leaky, and strictly better in one of them."""
    u, w = frame.loc[d, "utility"], frame.loc[d, worst_col]
    if np.isnan(u) or np.isnan(w):
        return False
    leak = (lambda x: x) if higher else (lambda x: -x)
    for other in frame.index:
        if other == d:
            continue
        u2, w2 = frame.loc[other, "utility"], frame.loc[other, worst_col]
        if np.isnan(u2) or np.isnan(w2):
            continue
        if u2 >= u and leak(w2) <= leak(w) and (u2 > u or leak(w2) < leak(w)):
            return False
    return True


def build(rows: list[dict[str, Any]], violations: Mapping[str, str] | None = None) -> list[TrackBoard]:
    """Boards of every track; ``violations`` (matchup key -> finding) come from ``arena.audit``."""
    rows = latest_rows(rows)
    tracks: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        tracks.setdefault(r["track"], []).append(r)
    return [track_board(name, rs, violations) for name, rs in tracks.items()]


def render_table(boards: list[TrackBoard]) -> str:
    out = []
    for b in boards:
        direction = "higher" if b.higher_is_better else "lower"
        out.append(f"== track {b.track} ({b.game}; {b.metric}, {direction} = stronger attack) ==")
        table = b.cells.copy()
        table.insert(0, "utility", b.utility.map(lambda v: "" if np.isnan(v) else f"{v:.3f}"))
        table.insert(1, "claimed ε", [f"{b.claimed[d]:.4g}" if d in b.claimed else "" for d in table.index])
        out.append(table.to_string())
        out.append("")
        out.append("95% t-intervals of the means over seeds:")
        out.append(interval_table(b).to_string())
        out.append("")
        out.append("attacks by mean rank across defenses (1 = strongest):")
        out.append(b.attack_ranking.to_string(float_format=lambda v: f"{v:.2f}"))
        out.append("")
        out.append("defenses: utility against worst-case attack score (pareto = on the front):")
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


def interval_table(board: TrackBoard) -> pd.DataFrame:
    """The t-interval of each mean (utility first) as display strings, shaped like ``cells``."""
    table = pd.DataFrame("", index=board.cells.index, columns=board.cells.columns)
    for (d, a), interval in board.intervals.items():
        table.loc[d, a] = interval.text()
    table.insert(0, "utility", [board.utility_intervals[d].text() if d in board.utility_intervals else ""
                                for d in table.index])
    return table


def render_csv(boards: list[TrackBoard]) -> str:
    frames = []
    for b in boards:
        long = b.means.stack(future_stack=True).rename("mean").reset_index()
        long.columns = ["defense", "attack", "mean"]
        long.insert(0, "metric", b.metric)
        long.insert(0, "track", b.track)
        long["ci_low"] = [_end(b, d, a, "low") for d, a in zip(long["defense"], long["attack"])]
        long["ci_high"] = [_end(b, d, a, "high") for d, a in zip(long["defense"], long["attack"])]
        long["cell"] = [b.cells.loc[d, a] for d, a in zip(long["defense"], long["attack"])]
        long["utility"] = [b.utility[d] for d in long["defense"]]
        long["claimed_epsilon"] = [b.claimed.get(d, math.nan) for d in long["defense"]]
        frames.append(long)
    return pd.concat(frames).to_csv(index=False) if frames else ""


def _end(board: TrackBoard, defense: str, attack: str, end: str) -> float:
    interval = board.intervals.get((defense, attack))
    return math.nan if interval is None else getattr(interval, end)


def render_json(boards: list[TrackBoard]) -> str:
    def clean(v: Any) -> Any:
        return None if isinstance(v, float) and np.isnan(v) else v

    out = []
    for b in boards:
        out.append({
            "track": b.track,
            "game": b.game,
            "metric": b.metric,
            "higher_is_better": b.higher_is_better,
            "cells": {d: {a: clean(b.means.loc[d, a]) for a in b.means.columns} for d in b.means.index},
            "intervals": {d: {a: [clean(_end(b, d, a, "low")), clean(_end(b, d, a, "high"))] for a in b.means.columns}
                          for d in b.means.index},
            "utility": {d: clean(v) for d, v in b.utility.items()},
            "claimed_epsilon": {d: b.claimed.get(d) for d in b.means.index},
            "attack_ranking": {a: clean(r) for a, r in b.attack_ranking["mean_rank"].items()},
            "defense_ranking": [
                {"defense": d, **{k: clean(v) for k, v in rec.items()}}
                for d, rec in b.defense_ranking.to_dict(orient="index").items()
            ],
            "failures": b.failures,
            "violations": b.violations,
        })
    return json.dumps(out, indent=2, default=lambda o: bool(o) if isinstance(o, np.bool_) else str(o))
