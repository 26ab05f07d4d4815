"""A track's board: the defense × attack cells of its ranking metric, every other metric in its own grid, failures,
skips and DP-audit findings marked in the cells, utility with its interval, and the two rankings.

The ranking metric is the one asked for (``--metric`` or the scenario's ``rank_by``) when the track has it, else
its game's default ranking metric, else its primary metric (both as the rows record them); the primary metric is
shown beside it. Intervals: from ``MIN_T_SEEDS`` seeds on, t-intervals over seeds; below, the bootstrap draws of
the game (``Resampler``: saved when each matchup was scored, or recomputed from its saved scores) where they hold
the metric, and otherwise no interval, never a t-interval from two or three seeds; a proportion of trials that
declares them (a reconstruction success rate over its targets), the binomial interval over the trials pooled
across seeds, whatever their number; the header says which. The defense ranking compares worst cases over attacks
with the cells' intervals made simultaneous over the attacks (``rankings``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from arena.contracts.arrays import ArrayLoader
from arena.contracts.metric import UNIT
from arena.pipeline.labels import legend_entries
from arena.results.leaderboard.grid import Groups, MetricGrid, metric_grid, unresolvable_warnings
from arena.results.leaderboard.intervals import CONFIDENCE, MIN_T_SEEDS, RESAMPLES, Interval, cell_interval
from arena.results.leaderboard.rankings import rankings, simultaneous_confidence
from arena.results.leaderboard.resample import DrawLoader, Resampler
from arena.results.leaderboard.rows import (
    GameMetrics,
    MetricInfo,
    claimed_epsilons,
    defense_order,
    game_metrics,
    latest_rows,
    metric_infos,
)


@dataclass(frozen=True)
class TrackBoard:
    """One track's results: cells of the ranking metric (``metric``), every metric in ``grids``, the rankings."""

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
    beside: tuple[str, ...] = ()  # metrics shown beside the ranking one (the game's primary metric)
    grids: dict[str, MetricGrid] = field(default_factory=dict)  # every metric of the track
    interval_method: str = ""  # the header line saying how intervals were computed
    n_seeds: int = 0  # the most ok seeds of any cell
    warnings: list[str] = field(default_factory=list)
    legend: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    """{"defense": {label: {name, params, epsilon}}, "attack": {label: {name, params}}}: each label's plugin and
    full parameters (``arena.pipeline.labels.legend_entries``)."""

    @property
    def shown(self) -> tuple[str, ...]:
        """The ranking metric, then those beside it."""
        return (self.metric, *self.beside)


NO_GAME_METRICS = GameMetrics()


def rank_metric(present: list[str], wanted: str | None = None, game: GameMetrics = NO_GAME_METRICS) -> str:
    """The metric a track is ranked by: ``wanted`` (``--metric`` or the scenario's ``rank_by``) when the track has
    it, else its game's default ranking metric, else its primary metric, else the first metric present."""
    for candidate in (wanted, game.rank, game.primary):
        if candidate and candidate in present:
            return candidate
    return present[0] if present else game.primary or ""


def _fall_back(track: str, metric: str, grids: dict[str, MetricGrid], primary: str | None) -> tuple[str, list[str]]:
    """A ranking metric that no cell resolves gives way to the primary metric (or the first declared metric some
    cell resolves), with a warning."""
    if not (metric in grids and grids[metric].means.isna().all().all() and grids[metric].not_resolvable):
        return metric, []
    other = next((m for m in (primary, *grids) if m in grids and m != metric and grids[m].info.declared
                  and not grids[m].means.isna().all().all()), None)
    if other is None:
        return metric, []
    return other, [f"warning: {track}: no cell resolves {metric}; ranked by {other} instead"]


def _marked(track: str, cells: pd.DataFrame, groups: Groups,
            violations: Mapping[str, str]) -> tuple[pd.DataFrame, list[str], list[str]]:
    """The cells with failures (FAILED×k), skips and DP-audit findings (VIOLATION×k) marked; the failure lines and
    the finding lines."""
    row = {d: i for i, d in enumerate(cells.index)}
    column = {a: j for j, a in enumerate(cells.columns)}
    values = cells.to_numpy(dtype=object, copy=True)  # marked as one array, not cell by cell through ``.loc``
    failures: list[str] = []
    flagged: list[str] = []
    for (d, a), group in groups.items():
        text = values[row[d], column[a]]
        bad = [r for r in group if r["status"] == "failed"]
        skipped = [r for r in group if r["status"] == "skipped"]
        if bad:
            text = (text + " " if text else "") + f"FAILED×{len(bad)}"
            failures.extend(f"{track} {d} vs {a} seed {r['seed']}: {r['error']}" for r in bad)
        if skipped and not text:
            text = "skipped"
        hits = [r for r in group if r["key"] in violations]
        if hits:
            text += f" VIOLATION×{len(hits)}"
            flagged.extend(f"{track} {d} vs {a} seed {r['seed']}: {violations[r['key']]}" for r in hits)
        values[row[d], column[a]] = text
    return pd.DataFrame(values, index=cells.index, columns=cells.columns), failures, flagged


def _utility(rows: list[dict[str, Any]], defenses: list[str]) -> tuple[pd.Series, dict[str, Interval]]:
    """Each defense's mean utility over its releases, with the t-interval over them from ``MIN_T_SEEDS`` on (no
    interval below: a release's test-set draws are not saved)."""
    releases: dict[str, dict[Any, float]] = {}  # defense → release → utility, one pass over the rows
    for r in rows:
        if r.get("utility") is not None:  # one per release (merged runs: per run too)
            releases.setdefault(r["defense_label"], {})[r.get("release_key", r["seed"])] = r["utility"]
    intervals = {d: cell_interval(list(releases[d].values()), None, UNIT) for d in defenses if releases.get(d)}
    utility = pd.Series({d: intervals[d].mean if d in intervals else np.nan for d in defenses}, dtype=np.float64)
    return utility, intervals


def _interval_method(main: MetricGrid, metric: str, n_seeds: int, resampler: Resampler) -> str:
    """The header line saying how the intervals were computed."""
    methods = {iv.method for iv in main.intervals.values()}
    if methods <= {"t"}:
        return f"95% t-intervals of the means over seeds ({n_seeds} seeds)"
    parts = []
    if "binomial" in methods:
        parts.append(f"exact binomial (Clopper–Pearson) intervals of {metric} over its trials "
                     f"({main.info.trials}) pooled across seeds")
    if "bootstrap" in methods:
        parts.append(f"percentile bootstrap over challenge points ({resampler.resamples} resamples of each seed's "
                     f"scores by its game, {resampler.source}, seeded by the matchup; mean over seeds) where a "
                     f"cell has fewer than {MIN_T_SEEDS} seeds")
    if "t" in methods:
        parts.append(f"t-intervals of the means over seeds where a cell has {MIN_T_SEEDS} or more")
    if "none" in methods:
        parts.append(f"no interval where a cell has fewer than {MIN_T_SEEDS} seeds (too few for a t-interval) "
                     f"and no bootstrap draws ({resampler.why_not(metric)})")
    return "95% intervals: " + "; ".join(parts)


def track_board(track: str, rows: list[dict[str, Any]], violations: Mapping[str, str] | None = None, *,
                rank_by: str | None = None, arrays: ArrayLoader | None = None, resamples: int = RESAMPLES,
                seed: int = 0, fallback: bool = True, draws: DrawLoader | None = None) -> TrackBoard:
    """One track's board; ``violations`` maps matchup keys the DP audit flags to a one-line finding, ``rank_by``
    names the ranking metric, ``draws(key)`` returns the bootstrap draws a matchup saved when it was scored and
    ``arrays(key)`` its saved arrays (to resample where it saved no draws); with ``fallback`` a ranking metric
    that no cell resolves gives way (with a warning) to the game's primary one."""
    game = rows[0]["game"]
    infos = metric_infos(rows)
    declared = game_metrics(rows)
    metric = rank_metric(list(infos), rank_by, declared)
    defenses = defense_order(rows)
    attacks = sorted({r["attack_label"] for r in rows})
    groups: Groups = {(d, a): [] for d in defenses for a in attacks}
    for r in rows:  # one pass over the rows, not one per cell
        groups[r["defense_label"], r["attack_label"]].append(r)
    n_seeds = max((sum(r["status"] == "ok" for r in g) for g in groups.values()), default=0)
    together_level = simultaneous_confidence(len(attacks))
    resampler = Resampler(game, arrays, list(infos), resamples=resamples, seed=seed, saved=draws, rows=rows,
                          confidences=(CONFIDENCE, together_level))
    grids = {n: metric_grid(info, groups, defenses, attacks, resampler) for n, info in infos.items()}
    warnings = unresolvable_warnings(track, grids, groups)
    if fallback:
        metric, warned = _fall_back(track, metric, grids, declared.primary)
        warnings.extend(warned)
    beside = tuple(m for m in (declared.primary,) if m and m != metric and m in grids)
    main = grids.get(metric) or MetricGrid.empty(infos.get(metric, MetricInfo(metric)), defenses, attacks)
    higher = main.info.higher_is_better
    cells, failures, flagged = _marked(track, main.cells, groups, violations or {})
    utility, utility_intervals = _utility(rows, defenses)
    # the defense ranking's worst case: the cells' intervals made simultaneous over the attacks (Bonferroni)
    together = (metric_grid(main.info, groups, defenses, attacks, resampler, together_level)
                if metric in grids else main)
    attack_ranking, defense_ranking = rankings(main.means, utility, metric, higher, defenses, together.intervals,
                                               frozenset(claimed_epsilons(rows)))
    return TrackBoard(track, game, metric, higher, cells, main.means, utility, attack_ranking, defense_ranking,
                      failures, main.intervals, utility_intervals, flagged, claimed_epsilons(rows), beside, grids,
                      _interval_method(main, metric, n_seeds, resampler), n_seeds, warnings,
                      legend_entries(rows))


def build(rows: list[dict[str, Any]], violations: Mapping[str, str] | None = None, *,
          rank_by: str | Mapping[str, str] | None = None, arrays: ArrayLoader | None = None,
          resamples: int = RESAMPLES, seed: int = 0, draws: DrawLoader | None = None) -> list[TrackBoard]:
    """Boards of every track; ``violations`` (matchup key -> finding) come from ``arena.results.audit``; ``rank_by``
    is one metric for every track (``--metric``) or scenario name → metric (the scenarios' ``rank_by``);
    ``draws`` loads the bootstrap draws a matchup saved when it was scored (``resample.saved_draws``), ``arrays``
    its saved arrays to resample where it saved none (without either: no interval below ``MIN_T_SEEDS`` seeds). One
    metric for every track is kept even where no cell resolves it; a scenario's ``rank_by`` or the default gives
    way to the game's primary metric there, with a warning."""
    rows = latest_rows(rows)
    tracks: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        tracks.setdefault(r["track"], []).append(r)
    boards = []
    for name, rs in tracks.items():
        wanted = (rank_by if isinstance(rank_by, str) or rank_by is None
                  else rank_by.get(rs[0].get("scenario")))  # type: ignore[arg-type]  # a row without one: None
        boards.append(track_board(name, rs, violations, rank_by=wanted, arrays=arrays, resamples=resamples,
                                  seed=seed, fallback=not isinstance(rank_by, str), draws=draws))
    return boards
