"""What a board reads from result rows: the latest row of each matchup, how to read each metric, the game's primary
and ranking metric, the claims, the scenarios' ``rank_by``.

Rows carry ``metric_info``, ``primary_metric`` and ``rank_metric`` (``arena.pipeline.row``), so reading a run imports
no plugin; rows written before they existed fall back to the registry (and to nothing, for a game no longer
registered).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arena.contracts.metric import fpr_level
from arena.pipeline.row import BOARD_COLUMNS


def latest_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last row written for each matchup key (a re-run replaces an earlier failure); rows lacking a board's
    columns (``arena.pipeline.row.BOARD_COLUMNS``) are left out."""
    by_key: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row.keys() >= BOARD_COLUMNS:
            by_key[row["key"]] = row
    return list(by_key.values())


def resolvable(metric: str, n_nonmembers: int | None) -> bool:
    """Whether ``n_nonmembers`` can resolve the FPR of ``metric`` (always, for metrics that are no TPR@FPR)."""
    level = fpr_level(metric)
    if level is None or n_nonmembers is None:
        return True
    return n_nonmembers > 0 and 1.0 / n_nonmembers <= level * (1 + 1e-9)


@dataclass(frozen=True)
class MetricInfo:
    """How to read a metric: its direction for the attacker and its range; ``declared`` False when neither the
    rows nor the registry know it (a count, say), when it is shown but read as 'higher' by default; ``trials``: the
    metric counting the independent trials of a proportion (its interval is then binomial), else None."""

    name: str
    higher_is_better: bool = True
    bounds: tuple[float, float] = (-math.inf, math.inf)
    declared: bool = False
    trials: str | None = None


def metric_infos(rows: list[dict[str, Any]]) -> dict[str, MetricInfo]:
    """Every metric named in ``rows`` with its direction and bounds, from the rows' ``metric_info`` first and the
    registry only for rows written before it existed."""
    infos: dict[str, MetricInfo] = {}
    names: list[str] = []
    undeclared: set[str] = set()  # metrics of rows written before rows carried metric_info
    for r in rows:
        if "metric_info" not in r:
            undeclared.update((r.get("metrics") or {}).keys())
        for name, info in (r.get("metric_info") or {}).items():
            if name not in infos and isinstance(info, Mapping):
                low, high = (list(info.get("bounds") or [None, None]) + [None, None])[:2]
                bounds = (-math.inf if low is None else float(low), math.inf if high is None else float(high))
                trials = info.get("trials")
                infos[name] = MetricInfo(name, bool(info.get("higher_is_better", True)), bounds, True,
                                         trials if isinstance(trials, str) else None)
        for name, value in (r.get("metrics") or {}).items():
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if name not in names and (value is None or number):
                names.append(name)
    missing = [n for n in names if n not in infos and n in undeclared]
    declared = registered_metrics() if missing else {}
    for n in missing:
        if n in declared:
            m = declared[n]
            infos[n] = MetricInfo(n, m.higher_is_better, tuple(m.bounds), True, getattr(m, "trials", None))
    return {n: infos.get(n, MetricInfo(n)) for n in names}


def known_metrics(rows: list[dict[str, Any]], track: str | None = None) -> list[str]:
    """Every metric named in the (latest) rows, of one track if given."""
    return list(metric_infos([r for r in latest_rows(rows) if track is None or r["track"] == track]))


def registered_metrics() -> dict[str, Any]:
    """Name → the registered ``Metric`` declaration; empty when the plugins fail to load."""
    try:
        from arena.plugins import registries

        return {e.name: e.obj for e in registries().metrics}
    except Exception:  # noqa: BLE001 - a plugin that fails to load must not hide the numbers
        return {}


def registered_game(name: str) -> type | None:
    """The registered game class ``name``, or None (not registered, or the plugins fail to load)."""
    try:
        from arena.plugins import registries

        games = registries().games
        return games.get(name) if name in games else None
    except Exception:  # noqa: BLE001 - a plugin that fails to load must not hide the numbers
        return None


@dataclass(frozen=True)
class GameMetrics:
    """A game's primary metric (shown beside the ranking one, the ranking metric of last resort) and its default
    ranking metric (None: the primary one)."""

    primary: str | None = None
    rank: str | None = None


def game_metrics(rows: list[dict[str, Any]]) -> GameMetrics:
    """The primary and default ranking metric of the game of ``rows`` (one track's), as the rows record them; for
    rows written before they did, as the registered game declares them."""
    for r in rows:
        if "primary_metric" in r or "rank_metric" in r:
            primary = r.get("primary_metric")
            return GameMetrics(primary, r.get("rank_metric") or primary)
    game = registered_game(rows[0]["game"]) if rows else None
    primary = getattr(game, "primary_metric", None)
    return GameMetrics(primary, getattr(game, "rank_metric", None) or primary)


def defense_order(rows: list[dict[str, Any]]) -> list[str]:
    """Defense labels: the non-private ones first, then by decreasing ε, then by label."""
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


def rank_by_of(run_dir: Path | str) -> dict[str, str]:
    """Scenario name → its ``rank_by``, from the scenario files kept in a run directory (unreadable ones skipped)."""
    from arena.pipeline.scenario import ScenarioError, parse_scenario

    out: dict[str, str] = {}
    for path in sorted((Path(run_dir) / "scenarios").glob("*.yaml")):
        try:
            scenario = parse_scenario(path)
        except (ScenarioError, OSError):
            continue
        if rank_by := getattr(scenario, "rank_by", None):
            out[scenario.name] = rank_by
    return out
