"""The leaderboard: per track, the defense × attack table of the primary metric, and two rankings."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from arena.metrics import PRIMARY_METRIC
from arena.plugins import registries


def latest_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last row written for each matchup key (a re-run replaces an earlier failure)."""
    by_key: dict[str, dict[str, Any]] = {}
    for row in rows:
        by_key[row["key"]] = row
    return list(by_key.values())


def mean_std(values: list[float]) -> tuple[float, float]:
    arr = np.asarray(values, dtype=np.float64)
    return float(arr.mean()), float(arr.std(ddof=1)) if len(arr) > 1 else 0.0


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


def _defense_order(rows: list[dict[str, Any]]) -> list[str]:
    seen: dict[str, tuple] = {}
    for r in rows:
        eps = r.get("epsilon")
        seen.setdefault(r["defense_label"], (r["defense"] != "nonprivate", -(eps or math.inf), r["defense_label"]))
    return sorted(seen, key=lambda label: seen[label])


def track_board(track: str, rows: list[dict[str, Any]]) -> TrackBoard:
    game = rows[0]["game"]
    metric = PRIMARY_METRIC[game]
    higher = registries().metrics.get(metric).higher_is_better
    defenses = _defense_order(rows)
    attacks = sorted({r["attack"] for r in rows})
    cells = pd.DataFrame("", index=defenses, columns=attacks)
    means = pd.DataFrame(np.nan, index=defenses, columns=attacks)
    failures = []
    for d in defenses:
        for a in attacks:
            group = [r for r in rows if r["defense_label"] == d and r["attack"] == a]
            ok = [r["metrics"][metric] for r in group if r["status"] == "ok" and r["metrics"].get(metric) is not None]
            bad = [r for r in group if r["status"] == "failed"]
            skipped = [r for r in group if r["status"] == "skipped"]
            text = ""
            if ok:
                mu, sd = mean_std(ok)
                means.loc[d, a] = mu
                text = f"{mu:.3f} ± {sd:.3f} (n={len(ok)})"
            if bad:
                text = (text + " " if text else "") + f"FAILED×{len(bad)}"
                failures.extend(f"{track} {d} vs {a} seed {r['seed']}: {r['error']}" for r in bad)
            if skipped and not ok and not bad:
                text = "skipped"
            cells.loc[d, a] = text
    utility = pd.Series(
        {d: np.mean([r["utility"] for r in rows if r["defense_label"] == d and r.get("utility") is not None] or [np.nan])
         for d in defenses}
    )
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
    # Defenses: utility against the worst case over attacks (for the defender).
    worst = means.max(axis=1) if higher else means.min(axis=1)
    defense_ranking = pd.DataFrame({"utility": utility, f"worst_{metric}": worst})
    defense_ranking["pareto"] = [
        _on_front(d, defense_ranking, f"worst_{metric}", higher) for d in defense_ranking.index
    ]
    leak = defense_ranking[f"worst_{metric}"] * (1 if higher else -1)
    order = defense_ranking.assign(_leak=leak).sort_values(["_leak", "utility"], ascending=[True, False]).index
    defense_ranking = defense_ranking.loc[order]
    return TrackBoard(track, game, metric, higher, cells, means, utility, attack_ranking, defense_ranking, failures)


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


def build(rows: list[dict[str, Any]]) -> list[TrackBoard]:
    rows = latest_rows(rows)
    tracks: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        tracks.setdefault(r["track"], []).append(r)
    return [track_board(t, rs) for t, rs in tracks.items()]


def render_table(boards: list[TrackBoard]) -> str:
    out = []
    for b in boards:
        direction = "higher" if b.higher_is_better else "lower"
        out.append(f"== track {b.track} ({b.game}; {b.metric}, {direction} = stronger attack) ==")
        table = b.cells.copy()
        table.insert(0, "utility", b.utility.map(lambda v: "" if np.isnan(v) else f"{v:.3f}"))
        out.append(table.to_string())
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
        out.append("")
    return "\n".join(out)


def render_csv(boards: list[TrackBoard]) -> str:
    frames = []
    for b in boards:
        long = b.means.stack(future_stack=True).rename("mean").reset_index()
        long.columns = ["defense", "attack", "mean"]
        long.insert(0, "metric", b.metric)
        long.insert(0, "track", b.track)
        long["cell"] = [b.cells.loc[d, a] for d, a in zip(long["defense"], long["attack"])]
        long["utility"] = [b.utility[d] for d in long["defense"]]
        frames.append(long)
    return pd.concat(frames).to_csv(index=False) if frames else ""


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
            "utility": {d: clean(v) for d, v in b.utility.items()},
            "attack_ranking": {a: clean(r) for a, r in b.attack_ranking["mean_rank"].items()},
            "defense_ranking": [
                {"defense": d, **{k: clean(v) for k, v in rec.items()}}
                for d, rec in b.defense_ranking.to_dict(orient="index").items()
            ],
            "failures": b.failures,
        })
    return json.dumps(out, indent=2, default=lambda o: bool(o) if isinstance(o, np.bool_) else str(o))
