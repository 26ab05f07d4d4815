"""The leaderboard: per track, the defense × attack table of the ranking metric, every other metric beside it,
and two rankings.

Membership tracks are ranked by TPR at 1 % FPR (Carlini et al. 2022) with AUC beside it unless the scenario's
``rank_by`` (or ``--metric``) says otherwise; reconstruction tracks by their game's primary metric. Cells show the
mean ± standard deviation over seeds. Each mean carries a 95 % interval: with fewer than ``MIN_T_SEEDS`` seeds a
percentile bootstrap over challenge points (members and non-members resampled separately from each seed's saved
scores, ``RESAMPLES`` times, seeded by the matchup key), otherwise the Student-t interval over seeds; the header
says which. A TPR at an FPR that the non-members cannot resolve (1/n_nonmembers > FPR) is ``n/r``, never a
number. Matchups the DP audit flags are marked VIOLATION.

Each row carries ``metric_info`` (direction and bounds of its game's metrics), so no plugin is imported to read a
run; rows written before it existed fall back to the registry.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import rankdata, t

from arena.contracts.metric import UNIT, tpr_key

BOARD_COLUMNS = frozenset({"key", "status", "track", "game", "defense", "defense_label", "attack_label", "seed"})
"""What a row needs to appear on a board; the store already set aside lines that are not rows at all."""

PRIMARY_METRIC = {"membership": "auc", "reconstruction": "success_rate"}
"""The metric shown beside the ranking one, and the ranking metric of last resort, of the built-in games (the
leaderboard reads rows alone, without loading the games that wrote them)."""
DEFAULT_RANK_BY = {"membership": tpr_key(0.01)}
"""A game's ranking metric when the scenario names none (otherwise the game's primary metric)."""
NOT_RESOLVABLE = "n/r"
MIN_T_SEEDS = 5
"""From this many seeds on, intervals are t-intervals over seeds; below it, bootstrap over challenge points."""
RESAMPLES = 1000
CONFIDENCE = 0.95
SCORE_METRICS = ("auc", "advantage")
"""Metrics (besides ``tpr@X%fpr``) that can be recomputed from a matchup's saved scores, hence bootstrapped."""
_TPR = re.compile(r"^tpr@([0-9.]+)%fpr$")

ArrayLoader = Callable[[str], Mapping[str, Any] | None]


def latest_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last row written for each matchup key (a re-run replaces an earlier failure); rows lacking a board's
    columns are left out."""
    by_key: dict[str, dict[str, Any]] = {}
    for row in rows:
        if BOARD_COLUMNS <= row.keys():
            by_key[row["key"]] = row
    return list(by_key.values())


def fpr_level(metric: str) -> float | None:
    """The FPR of a ``tpr@X%fpr`` metric (0.01 for ``tpr@1%fpr``), None for any other metric."""
    m = _TPR.match(metric)
    return float(m.group(1)) / 100 if m else None


def resolvable(metric: str, n_nonmembers: int | None) -> bool:
    """Whether ``n_nonmembers`` can resolve the FPR of ``metric`` (always, for metrics that are no TPR@FPR)."""
    level = fpr_level(metric)
    if level is None or n_nonmembers is None:
        return True
    return n_nonmembers > 0 and 1.0 / n_nonmembers <= level * (1 + 1e-9)


@dataclass(frozen=True)
class MetricInfo:
    """How to read a metric: its direction for the attacker and its range; ``declared`` False when neither the
    rows nor the registry know it (a count, say), when it is shown but read as 'higher' by default."""

    name: str
    higher_is_better: bool = True
    bounds: tuple[float, float] = (-math.inf, math.inf)
    declared: bool = False


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
                infos[name] = MetricInfo(name, bool(info.get("higher_is_better", True)),
                                         (-math.inf if low is None else float(low), math.inf if high is None else float(high)),
                                         True)
        for name, value in (r.get("metrics") or {}).items():
            if name not in names and (value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))):
                names.append(name)
    missing = [n for n in names if n not in infos and n in undeclared]
    if missing:
        try:
            from arena.plugins import registries

            declared = registries().metrics
            for n in missing:
                if n in declared:
                    m = declared.get(n)
                    infos[n] = MetricInfo(n, m.higher_is_better, tuple(m.bounds), True)
        except Exception:  # noqa: BLE001 - a plugin that fails to load must not hide the numbers
            pass
    return {n: infos.get(n, MetricInfo(n)) for n in names}


@dataclass(frozen=True)
class Interval:
    """A mean over seeds and its two-sided 95% interval: ``method`` "t" (Student-t over seeds; NaN ends for a single
    seed) or "bootstrap" (percentile bootstrap over challenge points)."""

    mean: float
    low: float
    high: float
    n: int
    method: str = "t"

    def text(self) -> str:
        """'[low, high]', or why there is none."""
        if math.isnan(self.low):
            return "one seed: no interval" if self.n < 2 else "no interval"
        return f"[{self.low:.3f}, {self.high:.3f}]"


def mean_std(values: list[float]) -> tuple[float, float]:
    arr = np.asarray(values, dtype=np.float64)
    return float(arr.mean()), float(arr.std(ddof=1)) if len(arr) > 1 else 0.0


def mean_interval(
    values: list[float], bounds: tuple[float, float] = (-math.inf, math.inf), confidence: float = CONFIDENCE
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


def score_metrics(scores: np.ndarray, is_member: np.ndarray, levels: tuple[float, ...]) -> dict[str, np.ndarray]:
    """AUC, advantage and TPR at each FPR in ``levels`` of every row of ``scores`` [B, N] (members where
    ``is_member`` [N] is true; higher means member); the same numbers as ``arena.contracts.metric.membership_metrics``,
    vectorised over the B rows."""
    S = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    lab = np.asarray(is_member, dtype=bool)
    m, n = int(lab.sum()), int((~lab).sum())
    ranks = rankdata(S, axis=1)
    out = {"auc": (ranks[:, lab].sum(axis=1) - m * (m + 1) / 2) / (m * n)}
    order = np.argsort(-S, axis=1, kind="stable")
    s_sorted = np.take_along_axis(S, order, axis=1)
    l_sorted = lab[order]
    tpr = np.cumsum(l_sorted, axis=1) / m
    fpr = np.cumsum(~l_sorted, axis=1) / n
    cut = np.ones_like(s_sorted, dtype=bool)  # a threshold can fall after position i only between distinct scores
    cut[:, :-1] = s_sorted[:, :-1] != s_sorted[:, 1:]
    out["advantage"] = np.maximum(np.where(cut, tpr - fpr, -np.inf).max(axis=1), 0.0)
    for level in levels:
        ok = cut & (fpr <= level + 1e-12)
        out[tpr_key(level)] = np.where(ok, tpr, 0.0).max(axis=1)
    return out


def bootstrap_metrics(scores: np.ndarray, is_member: np.ndarray, metrics: list[str], *, resamples: int = RESAMPLES,
                      seed: int = 0) -> dict[str, np.ndarray]:
    """Each metric of ``metrics`` that scores determine (AUC, advantage, TPR@FPR) on ``resamples`` stratified
    bootstrap resamples of one matchup's challenge points: members and non-members are each drawn with
    replacement, so every resample keeps the counts (and the FPR resolution) of the game played."""
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    lab = np.asarray(is_member).astype(bool).reshape(-1)
    members, nonmembers = scores[lab], scores[~lab]
    rng = np.random.default_rng(seed)
    out: dict[str, list[np.ndarray]] = {}
    levels = tuple(sorted({fpr_level(m) for m in metrics if fpr_level(m) is not None}))
    labels = np.r_[np.ones(len(members), bool), np.zeros(len(nonmembers), bool)]
    chunk = max(1, min(resamples, 2_000_000 // max(1, len(scores))))  # bound the memory of one batch
    done = 0
    while done < resamples:
        b = min(chunk, resamples - done)
        S = np.concatenate([members[rng.integers(0, len(members), (b, len(members)))],
                            nonmembers[rng.integers(0, len(nonmembers), (b, len(nonmembers)))]], axis=1)
        for k, v in score_metrics(S, labels, levels).items():
            out.setdefault(k, []).append(v)
        done += b
    return {k: np.concatenate(v) for k, v in out.items() if k in metrics}


def bootstrappable(metric: str) -> bool:
    return metric in SCORE_METRICS or fpr_level(metric) is not None


def matchup_seed(key: str, seed: int = 0) -> int:
    """The resampling seed of one matchup: fixed by its key (and the board's seed), not by the order of work."""
    return zlib.crc32(f"{seed}:{key}".encode("utf-8"))


@dataclass
class MetricGrid:
    """One metric over a track's defense × attack grid."""

    info: MetricInfo
    means: pd.DataFrame  # NaN where no ok seed or not resolvable
    cells: pd.DataFrame  # "mean ± sd (n=k)", "n/r" or ""
    intervals: dict[tuple[str, str], Interval] = field(default_factory=dict)
    not_resolvable: set[tuple[str, str]] = field(default_factory=set)
    seeds: dict[tuple[str, str], int] = field(default_factory=dict)


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
    beside: tuple[str, ...] = ()  # metrics shown beside the ranking one (AUC for membership)
    grids: dict[str, MetricGrid] = field(default_factory=dict)  # every metric of the track
    interval_method: str = ""  # the header line saying how intervals were computed
    n_seeds: int = 0  # the most ok seeds of any cell
    warnings: list[str] = field(default_factory=list)

    @property
    def shown(self) -> tuple[str, ...]:
        """The ranking metric, then those beside it."""
        return (self.metric, *self.beside)


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


def rank_metric(game: str, present: list[str], wanted: str | None = None) -> str:
    """The metric a track is ranked by: ``wanted`` (``--metric`` or the scenario's ``rank_by``) when the track has
    it, else its game's default (TPR at 1 % FPR for membership), else its primary metric."""
    for candidate in (wanted, DEFAULT_RANK_BY.get(game), PRIMARY_METRIC.get(game)):
        if candidate and candidate in present:
            return candidate
    return present[0] if present else PRIMARY_METRIC.get(game, "")


def _cached(arrays: ArrayLoader | None) -> ArrayLoader | None:
    if arrays is None:
        return None
    memo: dict[str, Any] = {}

    def load(key: str) -> Mapping[str, Any] | None:
        if key not in memo:
            memo[key] = arrays(key)
        return memo[key]

    return load


def _grid(info: MetricInfo, group_rows: dict[tuple[str, str], list[dict[str, Any]]], defenses: list[str],
          attacks: list[str], method: str, boot: Callable[[dict[str, Any]], dict[str, np.ndarray] | None]) -> MetricGrid:
    name = info.name
    grid = MetricGrid(info, pd.DataFrame(np.nan, index=defenses, columns=attacks),
                      pd.DataFrame("", index=defenses, columns=attacks))
    for (d, a), group in group_rows.items():
        ok = [r for r in group if r["status"] == "ok" and name in (r.get("metrics") or {})]
        if not ok:
            continue
        values = [r["metrics"][name] for r in ok]
        if any(v is None or not resolvable(name, r["metrics"].get("n_nonmembers")) for v, r in zip(values, ok)):
            grid.not_resolvable.add((d, a))
            grid.cells.loc[d, a] = NOT_RESOLVABLE
            continue
        values = [float(v) for v in values]
        mu, sd = mean_std(values)
        grid.means.loc[d, a] = mu
        grid.cells.loc[d, a] = f"{mu:.3f} ± {sd:.3f} (n={len(values)})"
        grid.seeds[d, a] = len(values)
        interval = None
        if method == "bootstrap" and bootstrappable(name):
            draws = [boot(r) for r in ok]
            if all(b is not None and name in b for b in draws):
                mean_draws = np.mean([b[name] for b in draws], axis=0)
                low, high = np.quantile(mean_draws, [(1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2])
                interval = Interval(mu, max(float(low), info.bounds[0]), min(float(high), info.bounds[1]),
                                    len(values), "bootstrap")
        grid.intervals[d, a] = interval or mean_interval(values, info.bounds)
    return grid


def track_board(track: str, rows: list[dict[str, Any]], violations: Mapping[str, str] | None = None, *,
                rank_by: str | None = None, arrays: ArrayLoader | None = None, resamples: int = RESAMPLES,
                seed: int = 0, fallback: bool = True) -> TrackBoard:
    """One track's board; ``violations`` maps matchup keys the DP audit flags to a one-line finding, ``rank_by``
    names the ranking metric, ``arrays(key)`` returns a matchup's saved scores (for bootstrap intervals); with
    ``fallback`` a ranking metric that no cell resolves gives way (with a warning) to the game's primary one."""
    violations = violations or {}
    game = rows[0]["game"]
    infos = metric_infos(rows)
    metric = rank_metric(game, list(infos), rank_by)
    defenses = _defense_order(rows)
    attacks = sorted({r["attack_label"] for r in rows})
    groups = {(d, a): [r for r in rows if r["defense_label"] == d and r["attack_label"] == a]
              for d in defenses for a in attacks}
    n_seeds = max((sum(r["status"] == "ok" for r in g) for g in groups.values()), default=0)
    method = "t" if n_seeds >= MIN_T_SEEDS else "bootstrap"
    arrays = _cached(arrays)
    drawn: dict[str, dict[str, np.ndarray] | None] = {}
    wanted = [n for n in infos if bootstrappable(n)]

    def boot(row: dict[str, Any]) -> dict[str, np.ndarray] | None:
        key = row["key"]
        if key not in drawn:
            saved = arrays(key) if arrays is not None else None
            drawn[key] = None if saved is None or "scores" not in saved or "is_member" not in saved else \
                bootstrap_metrics(saved["scores"], saved["is_member"], wanted, resamples=resamples,
                                  seed=matchup_seed(key, seed))
        return drawn[key]

    grids = {n: _grid(info, groups, defenses, attacks, method, boot) for n, info in infos.items()}
    warnings = []
    for n in infos:
        if grids[n].not_resolvable and fpr_level(n) is not None:
            counts = sorted({r["metrics"].get("n_nonmembers") for (d, a) in grids[n].not_resolvable
                             for r in groups[d, a] if r["status"] == "ok" and r["metrics"].get("n_nonmembers")})
            fewest = min(counts) if counts else None
            resolution = f"{fewest} non-members resolve FPR only to {1 / fewest:.2%}" if fewest else \
                "too few non-members"
            warnings.append(f"warning: {track}: {n} cannot be resolved in {len(grids[n].not_resolvable)} cell(s): "
                            f"{resolution} (1/n_nonmembers > FPR); shown as {NOT_RESOLVABLE}")
    if fallback and metric in grids and grids[metric].means.isna().all().all() and grids[metric].not_resolvable:
        fallback = next((m for m in (PRIMARY_METRIC.get(game), *infos) if m in grids and m != metric
                         and infos[m].declared and not grids[m].means.isna().all().all()), None)
        if fallback:
            warnings.append(f"warning: {track}: no cell resolves {metric}; ranked by {fallback} instead")
            metric = fallback
    beside = tuple(m for m in (PRIMARY_METRIC.get(game),) if m and m != metric and m in grids)
    info = infos.get(metric, MetricInfo(metric))
    higher = info.higher_is_better
    main = grids.get(metric) or MetricGrid(info, pd.DataFrame(np.nan, index=defenses, columns=attacks),
                                           pd.DataFrame("", index=defenses, columns=attacks))
    cells, means = main.cells.copy(), main.means
    failures, flagged = [], []
    for (d, a), group in groups.items():
        text = cells.loc[d, a]
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
        cells.loc[d, a] = text
    utility_intervals = {}
    for d in defenses:
        per_seed = {r["seed"]: r["utility"] for r in rows if r["defense_label"] == d and r.get("utility") is not None}
        if per_seed:
            utility_intervals[d] = mean_interval(list(per_seed.values()), UNIT)
    utility = pd.Series({d: utility_intervals[d].mean if d in utility_intervals else np.nan for d in defenses},
                        dtype=np.float64)
    attack_ranking, defense_ranking = _rankings(means, utility, metric, higher, defenses)
    booted = any(iv.method == "bootstrap" for iv in main.intervals.values())
    if booted:
        how = (f"95% intervals: percentile bootstrap over challenge points ({resamples} stratified resamples of each "
               f"seed's members and non-members, seeded; mean over seeds), since {n_seeds} seed(s) < {MIN_T_SEEDS}; "
               "t-intervals over seeds for metrics that saved scores do not determine")
    elif method == "bootstrap":
        why = "no saved scores to resample" if bootstrappable(metric) else \
            f"{metric} cannot be recomputed from saved scores"
        how = f"95% t-intervals of the means over seeds ({n_seeds} seed(s) < {MIN_T_SEEDS}, but {why})"
    else:
        how = f"95% t-intervals of the means over seeds ({n_seeds} seeds)"
    return TrackBoard(track, game, metric, higher, cells, means, utility, attack_ranking, defense_ranking, failures,
                      main.intervals, utility_intervals, flagged, claimed_epsilons(rows), beside, grids, how, n_seeds,
                      warnings)


def _rankings(means: pd.DataFrame, utility: pd.Series, metric: str, higher: bool,
              defenses: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
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
    return attack_ranking, defense_ranking.loc[order]


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


def rank_by_of(run_dir: Path | str) -> dict[str, str]:
    """Scenario name → its ``rank_by``, from the scenario files kept in a run directory (unreadable ones skipped)."""
    from arena.run.scenario import ScenarioError, parse_scenario

    out = {}
    for path in sorted((Path(run_dir) / "scenarios").glob("*.yaml")):
        try:
            scenario = parse_scenario(path)
        except (ScenarioError, OSError):
            continue
        if getattr(scenario, "rank_by", None):
            out[scenario.name] = scenario.rank_by
    return out


def build(rows: list[dict[str, Any]], violations: Mapping[str, str] | None = None, *,
          rank_by: str | Mapping[str, str] | None = None, arrays: ArrayLoader | None = None,
          resamples: int = RESAMPLES, seed: int = 0) -> list[TrackBoard]:
    """Boards of every track; ``violations`` (matchup key -> finding) come from ``arena.results.audit``; ``rank_by`` is one
    metric for every track (``--metric``) or scenario name → metric (the scenarios' ``rank_by``); ``arrays`` loads
    a matchup's saved scores for bootstrap intervals (without it: t-intervals over seeds). One metric for every
    track is kept even where no cell resolves it; a scenario's ``rank_by`` or the default gives way to the game's
    primary metric there, with a warning."""
    rows = latest_rows(rows)
    tracks: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        tracks.setdefault(r["track"], []).append(r)
    boards = []
    for name, rs in tracks.items():
        wanted = rank_by if isinstance(rank_by, str) or rank_by is None else rank_by.get(rs[0].get("scenario"))
        boards.append(track_board(name, rs, violations, rank_by=wanted, arrays=arrays, resamples=resamples,
                                  seed=seed, fallback=not isinstance(rank_by, str)))
    return boards


def known_metrics(rows: list[dict[str, Any]], track: str | None = None) -> list[str]:
    """Every metric named in the (latest) rows, of one track if given."""
    return list(metric_infos([r for r in latest_rows(rows) if track is None or r["track"] == track]))


def _fmt(v: float) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"


def interval_table(board: TrackBoard, metric: str | None = None) -> pd.DataFrame:
    """The interval of each mean of ``metric`` (the ranking one by default; utility first) as display strings,
    shaped like ``cells``; ``n/r`` where the metric cannot be resolved."""
    grid = board.grids.get(metric or board.metric)
    table = pd.DataFrame("", index=board.cells.index, columns=board.cells.columns)
    intervals = grid.intervals if grid is not None else board.intervals
    for (d, a), interval in intervals.items():
        table.loc[d, a] = interval.text()
    for d, a in (grid.not_resolvable if grid is not None else ()):
        table.loc[d, a] = NOT_RESOLVABLE
    table.insert(0, "utility", [board.utility_intervals[d].text() if d in board.utility_intervals else ""
                                for d in table.index])
    return table


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
        out.append("")
        out.append(f"attacks by mean rank of {b.metric} across defenses (1 = strongest):")
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


def long_rows(boards: list[TrackBoard]) -> list[dict[str, Any]]:
    """One record per track × defense × attack with every metric's mean and interval ends (``n/r`` for a mean that
    cannot be resolved), the ranking metric, the interval method, utility and claimed ε."""
    out = []
    for b in boards:
        for d in b.means.index:
            for a in b.means.columns:
                rec: dict[str, Any] = {
                    "track": b.track, "game": b.game, "defense": d, "attack": a, "rank_by": b.metric,
                    "seeds": max((g.seeds.get((d, a), 0) for g in b.grids.values()), default=0),
                    "interval": getattr(b.intervals.get((d, a)), "method", ""),
                    "utility": b.utility.get(d, math.nan), "claimed_epsilon": b.claimed.get(d, math.nan),
                    "cell": b.cells.loc[d, a],
                }
                for name, g in b.grids.items():
                    if (d, a) in g.not_resolvable:
                        rec[name], rec[f"{name}_low"], rec[f"{name}_high"] = NOT_RESOLVABLE, math.nan, math.nan
                        continue
                    iv = g.intervals.get((d, a))
                    rec[name] = g.means.loc[d, a]
                    rec[f"{name}_low"] = math.nan if iv is None else iv.low
                    rec[f"{name}_high"] = math.nan if iv is None else iv.high
                out.append(rec)
    return out


def render_csv(boards: list[TrackBoard]) -> str:
    """One line per track × defense × attack; for every metric its mean, ``_low`` and ``_high`` columns."""
    records = long_rows(boards)
    if not records:
        return ""
    fixed = ["track", "game", "defense", "attack", "rank_by", "seeds", "interval", "utility", "claimed_epsilon"]
    metrics: list[str] = []
    for b in boards:
        for m in (*b.shown, *b.grids):
            if m not in metrics:
                metrics.append(m)
    declared = {m for b in boards for m, g in b.grids.items() if g.info.declared}
    columns = [*fixed, *(c for m in metrics for c in ((m, f"{m}_low", f"{m}_high") if m in declared else (m,))),
               "cell"]
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
