"""The leaderboard: per track, the defense × attack table of the ranking metric, every other metric beside it,
and two rankings; read from result rows alone (no game's code is imported to read a run, only, for bootstrap
intervals, the registered game's ``resample``).

Each track is ranked by the metric asked for (``--metric``, the scenario's ``rank_by``), else by its game's
default ranking metric (TPR at 1 % FPR for membership, Carlini et al. 2022), else by its primary metric, which is
shown beside it (AUC for membership); the rows record both (``primary_metric``, ``rank_metric``). Cells show the
mean ± standard deviation over seeds. Each mean carries a 95 % interval: with fewer than ``MIN_T_SEEDS`` seeds a
percentile bootstrap by the game over each seed's challenge points (``RESAMPLES`` draws, seeded by the matchup key,
drawn once when the matchup was scored and saved beside its row), or none where there are no draws (never a
t-interval from two or three seeds); from ``MIN_T_SEEDS`` seeds on, the Student-t interval over seeds; for a
proportion of trials that declares them (a reconstruction success rate over its targets), the exact binomial
interval over the trials pooled across seeds, whatever their number; the header says which. A TPR at an FPR that
the non-members cannot resolve (1/n_nonmembers > FPR) is ``n/r``, never a number; one that is a number carries its
operating point (the rows' ``operating_points``: threshold, realised FPR, false positives / non-members, pooled
over seeds), in every format. Matchups the DP audit flags are
marked VIOLATION.

The modules, one job each: ``rows`` (what a board reads from rows), ``intervals`` (the statistics of a cell),
``resample`` (bootstrap draws by the game), ``grid`` (one metric over the grid), ``rankings``, ``board`` (a track's
board, ``build``) and ``render`` (table, CSV, JSON).
"""

from __future__ import annotations

from arena.contracts.metric import fpr_level
from arena.results.leaderboard.board import TrackBoard, build, rank_metric, track_board
from arena.results.leaderboard.grid import NOT_RESOLVABLE, MetricGrid, OperatingPoint
from arena.results.leaderboard.intervals import (
    CONFIDENCE,
    MIN_T_SEEDS,
    RESAMPLES,
    Interval,
    binomial_interval,
    bootstrap_interval,
    cell_interval,
    mean_interval,
    mean_std,
    no_interval,
)
from arena.results.leaderboard.rankings import rankings
from arena.results.leaderboard.render import (
    POINT_COLUMNS,
    interval_table,
    long_rows,
    operating_table,
    render_csv,
    render_json,
    render_table,
)
from arena.results.leaderboard.resample import DrawLoader, Resampler, saved_draws
from arena.results.leaderboard.rows import (
    GameMetrics,
    MetricInfo,
    claimed_epsilons,
    game_metrics,
    known_metrics,
    latest_rows,
    metric_infos,
    rank_by_of,
    resolvable,
)

__all__ = [
    "CONFIDENCE", "MIN_T_SEEDS", "NOT_RESOLVABLE", "POINT_COLUMNS", "RESAMPLES", "DrawLoader", "GameMetrics",
    "Interval", "MetricGrid", "MetricInfo", "OperatingPoint", "Resampler", "TrackBoard", "binomial_interval",
    "bootstrap_interval", "build", "cell_interval", "claimed_epsilons", "fpr_level", "game_metrics", "interval_table",
    "known_metrics", "latest_rows", "long_rows", "mean_interval", "mean_std", "metric_infos", "no_interval",
    "operating_table", "rank_by_of", "rank_metric", "rankings", "render_csv", "render_json", "render_table",
    "resolvable", "saved_draws", "track_board",
]
