"""The statistics of a cell: the mean over seeds with its sample standard deviation, and its 95 % interval: the
Student-t interval over seeds from ``MIN_T_SEEDS`` seeds on, below that a percentile bootstrap of the mean from
each seed's resampled metric, and no interval at all (``no_interval``, saying why) where neither applies: a
t-interval from two or three seeds is no measurement (one from 2 seeds multiplies the spread by 12.7). A
proportion of independent trials (a reconstruction success rate over its targets) gets the exact binomial
interval over the trials pooled across seeds whatever the number of seeds (``binomial_interval``): seeds that
agree, or a rate of 0, never give a zero-width interval."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from arena.engine.seeds import RESAMPLES as RESAMPLES  # drawn once per matchup when it is scored

MIN_T_SEEDS = 5
"""From this many seeds on, intervals are t-intervals over seeds; below it, bootstrap over challenge points, or
none."""
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    """A mean over seeds and its two-sided 95% interval: ``method`` "t" (Student-t over seeds; NaN ends for a single
    seed), "bootstrap" (percentile bootstrap over challenge points), "binomial" (Clopper–Pearson over the trials
    pooled across seeds) or "none" (NaN ends: too few seeds for a t-interval and no bootstrap draws)."""

    mean: float
    low: float
    high: float
    n: int
    method: str = "t"

    def text(self) -> str:
        """'[low, high]', or why there is none."""
        if math.isnan(self.low):
            if self.n < 2:
                return "one seed: no interval"
            return f"no interval ({self.n} seeds)" if self.method == "none" else "no interval"
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
    from scipy.special import stdtrit  # Student t's quantile, as scipy.stats.t.ppf computes it, without scipy.stats

    arr = np.asarray(values, dtype=np.float64)
    mean = float(arr.mean())
    if len(arr) < 2:
        return Interval(mean, math.nan, math.nan, len(arr))
    half = float(stdtrit(len(arr) - 1, (1 + confidence) / 2) * arr.std(ddof=1) / math.sqrt(len(arr)))
    low, high = bounds
    return Interval(mean, max(mean - half, low), min(mean + half, high), len(arr))


@dataclass(frozen=True)
class CellDraws:
    """A cell's bootstrap draws of one metric, summarised as soon as they are read (``cell_draws``): the number of
    seeds, and the percentile ends of the mean over the seeds' draws at each confidence level asked for. A board
    keeps these few numbers per cell instead of every matchup's draws, so that its memory does not grow with the
    draws it reads."""

    seeds: int
    ends: Mapping[float, tuple[float, float]]


def percentile_ends(mean_draws: np.ndarray, confidence: float) -> tuple[float, float]:
    """The two-sided percentile interval's ends of ``mean_draws`` at ``confidence``."""
    low, high = np.quantile(mean_draws, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(low), float(high)


def cell_draws(draws: Sequence[np.ndarray], confidences: Iterable[float]) -> CellDraws:
    """Each seed's draws of a metric (the same number for every seed) summarised at each of ``confidences``."""
    mean_draws = np.mean(np.asarray(draws, dtype=np.float64), axis=0)
    return CellDraws(len(draws), {c: percentile_ends(mean_draws, c) for c in confidences})


def cell_draws_of(draws: Sequence[Mapping[str, np.ndarray]], metrics: Sequence[str],
                  confidences: Sequence[float]) -> dict[str, CellDraws]:
    """``cell_draws`` of each of ``metrics`` (which every seed's ``draws`` hold, as many draws each) at once: one
    mean over the seeds and one quantile call for the whole cell."""
    if not metrics or not draws:
        return {}
    stacked = np.asarray([[d[m] for m in metrics] for d in draws], dtype=np.float64)  # seeds × metrics × draws
    levels = [p for c in confidences for p in ((1 - c) / 2, (1 + c) / 2)]
    ends = np.quantile(np.mean(stacked, axis=0), levels, axis=1)  # levels × metrics
    return {m: CellDraws(len(draws), {c: (float(ends[2 * k, i]), float(ends[2 * k + 1, i]))
                                      for k, c in enumerate(confidences)}) for i, m in enumerate(metrics)}


def bootstrap_interval(mean: float, draws: Sequence[np.ndarray] | CellDraws,
                       bounds: tuple[float, float] = (-math.inf, math.inf), confidence: float = CONFIDENCE) -> Interval:
    """The percentile interval of the mean over seeds, each seed's metric drawn ``len(draws[i])`` times (the
    same number for every seed; or their summary, ``CellDraws``), cut to ``bounds``."""
    summary = draws if isinstance(draws, CellDraws) else cell_draws(draws, (confidence,))
    if confidence not in summary.ends:
        raise ValueError(f"the cell's draws were summarised at {sorted(summary.ends)}, not at {confidence}")
    low, high = summary.ends[confidence]
    return Interval(mean, max(low, bounds[0]), min(high, bounds[1]), summary.seeds, "bootstrap")


def binomial_interval(values: Sequence[float], trials: Sequence[int], confidence: float = CONFIDENCE) -> Interval:
    """The mean over seeds of a proportion with the exact (Clopper–Pearson) interval of its successes over the
    trials pooled across seeds: seed i's ``values[i]`` of ``trials[i]`` trials is ``round(values[i]·trials[i])``
    successes (``arena.privacy.binomial``)."""
    from arena.privacy.binomial import clopper_pearson  # scipy.stats with it, only for a board of proportions

    successes = sum(round(v * n) for v, n in zip(values, trials))
    low, high = clopper_pearson(successes, sum(trials), confidence)
    return Interval(float(np.mean(np.asarray(values, dtype=np.float64))), float(low), float(high), len(values),
                    "binomial")


def no_interval(values: Sequence[float]) -> Interval:
    """The mean of ``values`` without an interval (``method`` "none"): fewer than ``MIN_T_SEEDS`` seeds and no
    bootstrap draws."""
    return Interval(float(np.mean(np.asarray(values, dtype=np.float64))), math.nan, math.nan, len(values), "none")


def cell_interval(values: Sequence[float], draws: Sequence[np.ndarray] | CellDraws | None,
                  bounds: tuple[float, float] = (-math.inf, math.inf),
                  trials: Sequence[int] | None = None, confidence: float = CONFIDENCE) -> Interval:
    """A cell's interval at ``confidence``: binomial over the pooled ``trials`` (each seed's number of trials, for a
    proportion), else t over seeds from ``MIN_T_SEEDS`` seeds on, else the bootstrap of ``draws`` (each seed's
    draws of the metric, or their ``CellDraws``), else none."""
    if trials is not None:
        return binomial_interval(values, trials, confidence)
    if len(values) >= MIN_T_SEEDS:
        return mean_interval(list(values), bounds, confidence)
    if draws is not None:
        return bootstrap_interval(float(np.mean(values)), draws, bounds, confidence)
    return no_interval(values)
