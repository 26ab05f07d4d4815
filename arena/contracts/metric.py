"""Metric declarations (each game declares its own, ``Game.metrics``; plugins add more with
``register_metrics``) and the ROC helpers games share."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

FPR_LEVELS = (0.1, 0.01, 0.001)


@dataclass(frozen=True)
class Metric:
    """A named score of one game, with its direction (for the attacker) and the range its values can take.
    ``trials``: for a proportion of independent trials (a success rate over targets), the metric of the same
    outcome holding their number (``n_targets``): the leaderboard's interval is then the exact binomial one over
    the trials pooled across seeds (Clopper–Pearson), never a t-interval that two equal seeds shrink to a point."""

    name: str
    game: str
    higher_is_better: bool
    description: str
    bounds: tuple[float, float] = (-math.inf, math.inf)
    trials: str | None = None


def tpr_key(fpr: float) -> str:
    return f"tpr@{fpr * 100:g}%fpr"


def fpr_level(metric: str) -> float | None:
    """The FPR of a ``tpr@X%fpr`` metric (0.01 for ``tpr@1%fpr``; the inverse of ``tpr_key``), also of one with a
    sample prefix (``vr_tpr@0.1%fpr``: the membership game's vulnerable records), else None."""
    m = re.match(r"^(?:[a-z]+_)?tpr@([0-9.]+)%fpr$", metric)
    return float(m.group(1)) / 100 if m else None


def nonmembers_key(metric: str) -> str:
    """The metric counting the non-members behind a TPR@FPR: ``n_nonmembers``, or ``<prefix>_nonmembers`` for one
    with a sample prefix (``vr_nonmembers`` for ``vr_tpr@0.1%fpr``)."""
    prefix = metric.partition("tpr@")[0]
    return f"{prefix}nonmembers" if prefix else "n_nonmembers"


UNIT = (0.0, 1.0)  # the range of a rate, a probability or an AUC; also of utility (test accuracy)
NON_NEGATIVE = (0.0, math.inf)


def tpr_at_fpr(fpr: np.ndarray, tpr: np.ndarray, level: float) -> float:
    """Largest TPR among ROC points whose FPR does not exceed ``level``."""
    ok = fpr <= level + 1e-12
    return float(tpr[ok].max()) if ok.any() else 0.0
