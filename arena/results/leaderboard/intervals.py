"""The statistics of a cell: the mean over seeds with its sample standard deviation, and its 95 % interval, the
Student-t interval over seeds or a percentile bootstrap of the mean from each seed's resampled metric."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import t

MIN_T_SEEDS = 5
"""From this many seeds on, intervals are t-intervals over seeds; below it, bootstrap over challenge points."""
RESAMPLES = 1000
CONFIDENCE = 0.95


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


def bootstrap_interval(mean: float, draws: Sequence[np.ndarray], bounds: tuple[float, float] = (-math.inf, math.inf),
                       confidence: float = CONFIDENCE) -> Interval:
    """The percentile interval of the mean over seeds, each seed's metric drawn ``len(draws[i])`` times (the
    same number for every seed), cut to ``bounds``."""
    mean_draws = np.mean(np.asarray(draws, dtype=np.float64), axis=0)
    low, high = np.quantile(mean_draws, [(1 - confidence) / 2, (1 + confidence) / 2])
    return Interval(mean, max(float(low), bounds[0]), min(float(high), bounds[1]), len(draws), "bootstrap")
