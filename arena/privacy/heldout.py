"""The held-out Clopper–Pearson bound on ε: the test is chosen on one half of the scores and counted on the other,
so that searching for the best threshold does not inflate the bound (the old audit's flaw).

**Clopper–Pearson bound with held-out threshold selection** (``heldout_epsilon``; Jagielski, Ullman & Oprea
2020, "Auditing Differentially Private Machine Learning: How Private is Private SGD?", and Nasr et al. 2021,
"Adversary Instantiation"; the held-out split as in jax_privacy's auditing module). The scores are split (seeded,
per class) into a selection half and an evaluation half; the test (threshold and side) is chosen on the
selection half, then, on the evaluation half alone, ``arena.privacy.binomial.epsilon_from_counts`` gives

    ε ≥ ε_lb = max(0, log((TPR_lo − δ)/FPR_hi), log((1 − FPR_hi − δ)/(1 − TPR_lo)))

with confidence 1 − α. It is valid because the test is fixed before the evaluation half is looked at; taking the
best threshold on the same data (the old audit) is not. It treats the evaluation points as independent trials,
which holds exactly when each point comes from its own run of the mechanism (K models, canaries): then it is
*proved*. For many points scored on one model it is the conventional estimate, and the one-run bound
(``arena.privacy.one_run``) is the one that is proved.

The selection helpers (``split_halves``, ``select_test``, ``evaluate_test``, ``as_batch``) serve the Gaussian-DP
estimate of ``arena.privacy.gdp`` too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from arena.privacy.binomial import (
    ALPHA,
    check_counts,
    cp_lower,
    cp_upper,
    epsilon_from_counts,
    epsilon_from_rates,
    max_certifiable,
)

Direction = Literal["higher", "lower", ""]

Objective = Callable[[np.ndarray, int, np.ndarray, int], np.ndarray]
"""What a test is chosen for: ``objective(tp, n_pos, fp, n_neg)``, larger is better, vectorised over the counts."""


def as_batch(scores: ArrayLike, truth: ArrayLike, same_counts: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(scores (R, n) float64, truth (R, n) bool) of R experiments; ValueError on NaN scores or, with
    ``same_counts``, on rows with different numbers of positives."""
    scores = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    truth = np.broadcast_to(np.atleast_2d(np.asarray(truth).astype(bool)), scores.shape)
    if np.isnan(scores).any():
        raise ValueError("scores contain NaN")
    counts = truth.sum(axis=-1)
    if same_counts and not np.all(counts == counts[0]):
        raise ValueError("every row needs the same number of positives")
    return scores, np.ascontiguousarray(truth)


def split_halves(truth: ArrayLike, seed: int) -> np.ndarray:
    """Selection mask: within each row and each class, a seeded random ⌊n_c/2⌋ of the points select the test,
    the other ⌈n_c/2⌉ evaluate it. ``truth`` is (n,) or (R, n); the mask has its shape."""
    truth = np.asarray(truth).astype(bool)
    rows = np.atleast_2d(truth)
    rng = np.random.default_rng(seed)
    sel = np.zeros(rows.shape, bool)
    if np.all(rows == rows[0]):  # one class layout for every row: shuffle each class's positions (no sort)
        R = rows.shape[0]
        for cls in (False, True):
            idx = np.flatnonzero(rows[0] == cls)
            chosen = rng.permuted(np.broadcast_to(idx, (R, len(idx))), axis=1)[:, : len(idx) // 2]
            np.put_along_axis(sel, chosen, True, axis=1)
    else:
        key = rng.random(rows.shape) + 2.0 * rows  # sorts class 0 first, each class in random order
        rank = np.argsort(np.argsort(key, axis=-1), axis=-1)
        n0 = (~rows).sum(axis=-1, keepdims=True)
        n1 = rows.sum(axis=-1, keepdims=True)
        sel = np.where(rows, rank - n0, rank) < np.where(rows, n1 // 2, n0 // 2)
    return sel.reshape(truth.shape)


def cuts(scores: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row, the tests "score ≥ t" at every realisable cut of the descending order: (tp, fp, valid, t), each
    (R, n + 1); cut c flags the c highest scores (t halfway between the c-th and (c+1)-th highest, +inf for
    c = 0, −inf for c = n); a cut inside a run of tied scores cannot be realised by a threshold and is not valid."""
    order = np.argsort(-scores, axis=-1, kind="stable")
    s = np.take_along_axis(scores, order, axis=-1)
    y = np.take_along_axis(truth, order, axis=-1)
    R, n = s.shape
    zero = np.zeros((R, 1), np.int64)
    tp = np.concatenate([zero, np.cumsum(y, axis=-1)], axis=-1)
    fp = np.arange(n + 1)[None, :] - tp
    valid = np.ones((R, n + 1), bool)
    valid[:, 1:n] = s[:, :-1] > s[:, 1:]
    with np.errstate(invalid="ignore", over="ignore"):
        mid = s[:, :-1] / 2 + s[:, 1:] / 2  # halfway to the next score: a test that generalises to new points
    mid = np.where(np.isnan(mid), s[:, :-1], mid)
    t = np.concatenate([np.full((R, 1), np.inf), mid, np.full((R, 1), -np.inf)], axis=-1)
    return tp, fp, valid, t


def select_test(scores: np.ndarray, truth: np.ndarray, sel: np.ndarray,
                objective: Objective) -> tuple[np.ndarray, np.ndarray]:
    """On the selection points of each row, the side (+1: higher means positive, −1: lower) and threshold that
    maximise ``objective(tp, n_pos, fp, n_neg)``. Returns (sign, t), each (R,)."""
    R = scores.shape[0]
    k = int(sel[0].sum())
    if not np.all(sel.sum(axis=-1) == k):
        raise ValueError("every row needs the same number of selection points")
    s = scores[sel].reshape(R, k)
    y = truth[sel].reshape(R, k)
    n_pos = int(y[0].sum())
    n_neg = k - n_pos
    best_val = np.full(R, -np.inf)
    best_sign = np.ones(R)
    best_t = np.full(R, np.inf)
    for sign in (1.0, -1.0):
        tp, fp, valid, t = cuts(sign * s, y)
        val = np.where(valid, objective(tp, n_pos, fp, n_neg), -np.inf)
        j = np.argmax(val, axis=-1)
        v = val[np.arange(R), j]
        better = v > best_val
        best_val = np.where(better, v, best_val)
        best_sign = np.where(better, sign, best_sign)
        best_t = np.where(better, t[np.arange(R), j], best_t)
    return best_sign, best_t


def evaluate_test(scores: np.ndarray, truth: np.ndarray, ev: np.ndarray, sign: np.ndarray,
                  t: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Counts of the fixed tests (sign·score ≥ t) on the evaluation points: (tp, fp, n_pos, n_neg)."""
    flagged = (sign[:, None] * scores >= t[:, None]) & ev
    tp = (flagged & truth).sum(axis=-1)
    fp = (flagged & ~truth).sum(axis=-1)
    n_pos = int((ev & truth)[0].sum())
    n_neg = int((ev & ~truth)[0].sum())
    return tp, fp, n_pos, n_neg


def cp_objective(delta: float, alpha: float) -> Objective:
    """ε_lb as a function of counts, through lookup tables of the Clopper–Pearson ends (fast for many cuts)."""
    def objective(tp: np.ndarray, n_pos: int, fp: np.ndarray, n_neg: int) -> np.ndarray:
        lo = cp_lower(np.arange(n_pos + 1), n_pos, alpha / 2)
        hi = cp_upper(np.arange(n_neg + 1), n_neg, alpha / 2)
        return epsilon_from_rates(lo[tp], hi[fp], delta)
    return objective


@dataclass(frozen=True)
class HeldOutBound:
    """ε ≥ ``epsilon`` with confidence 1 − ``alpha``, from a test chosen on the selection half and counted on the
    evaluation half (sizes ``n_pos`` + ``n_neg``; ``max_certifiable`` is the most those sizes can show)."""

    epsilon: float
    alpha: float
    delta: float
    direction: Direction  # "higher": a score ≥ threshold is called positive; "lower": a score ≤ −threshold
    threshold: float
    true_positives: int  # on the evaluation half
    false_positives: int
    n_pos: int  # evaluation half
    n_neg: int
    n_pos_total: int
    n_neg_total: int
    max_certifiable: float
    method: str = "Clopper–Pearson, held-out threshold"


def heldout_epsilon_batch(
    scores: ArrayLike, truth: ArrayLike, delta: float, alpha: float = ALPHA, seed: int = 0
) -> tuple[np.ndarray, dict[str, Any]]:
    """``heldout_epsilon`` for R experiments at once: scores (R, n), truth (n,) or (R, n) with the same class
    counts per row. Returns (ε_lb of shape (R,), details: sign, threshold, tp, fp, n_pos, n_neg)."""
    scores, truth = as_batch(scores, truth)
    sel = split_halves(truth, seed)
    sign, t = select_test(scores, truth, sel, cp_objective(delta, alpha))
    tp, fp, n_pos, n_neg = evaluate_test(scores, truth, ~sel, sign, t)
    check_counts(n_pos, n_neg, alpha, delta)
    eps = epsilon_from_counts(tp, n_pos, fp, n_neg, delta, alpha)
    return eps, {"sign": sign, "threshold": t, "tp": tp, "fp": fp, "n_pos": n_pos, "n_neg": n_neg}


def heldout_epsilon(
    scores: ArrayLike, truth: ArrayLike, delta: float, alpha: float = ALPHA, seed: int = 0
) -> HeldOutBound:
    """Clopper–Pearson ε lower bound with the threshold and side chosen on a seeded half of the points (per
    class) and the bound computed on the other half; see the module docstring. ``truth``: 1 for the points of
    the world "with" (members, canaries in), 0 for the other. Both halves need each class (≥ 2 of each)."""
    eps, d = heldout_epsilon_batch(scores, truth, delta, alpha, seed)
    truth = np.asarray(truth).astype(bool).reshape(-1)
    n_pos_total, n_neg_total = int(truth.sum()), int((~truth).sum())
    sign, t = float(d["sign"][0]), float(d["threshold"][0])
    e = float(eps[0])
    return HeldOutBound(
        epsilon=e, alpha=alpha, delta=delta,
        direction=("higher" if sign > 0 else "lower") if e > 0 else "",
        threshold=t, true_positives=int(d["tp"][0]), false_positives=int(d["fp"][0]),
        n_pos=d["n_pos"], n_neg=d["n_neg"], n_pos_total=n_pos_total, n_neg_total=n_neg_total,
        max_certifiable=max_certifiable(d["n_pos"], d["n_neg"], alpha, delta),
    )
