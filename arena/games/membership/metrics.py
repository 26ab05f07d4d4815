"""The membership game's metrics: their declarations, their computation from scores, and their bootstrap.

One computation serves the game and the leaderboard: ``score_metrics`` gives the AUC, the advantage and the TPR at
each FPR of B score vectors at once (vectorised over the rows; scikit-learn's ``roc_auc_score`` and ``roc_curve``
agree with it, which the tests check). ``membership_metrics`` is its first row plus the checks, the balanced
accuracy and the notes; ``operating_points`` the cut behind each TPR@FPR (threshold, realised FPR, false and true
positive counts), read from the same sort, for the point estimate only (``membership_scores`` gives both);
``resample`` (the game's ``resample``) is ``score_metrics`` on stratified bootstrap resamples of a matchup's saved
scores (no operating points: a resample's threshold is no statement about the game played).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from arena.contracts.metric import FPR_LEVELS, UNIT, Metric, fpr_level, tpr_key

METRICS = (
    Metric("auc", "membership", True, "area under the attack's ROC curve (0.5 = chance)", UNIT),
    Metric("advantage", "membership", True, "membership advantage max(TPR - FPR) over thresholds", UNIT),
    Metric("balanced_accuracy", "membership", True, "(TPR + TNR) / 2 at the attack's own threshold", UNIT),
    *(
        Metric(tpr_key(f), "membership", True, f"TPR at {f:.1%} FPR; null when the non-members cannot resolve it",
               UNIT)
        for f in FPR_LEVELS
    ),
)
SCORE_METRICS = ("auc", "advantage")
"""Metrics (besides ``tpr@X%fpr``) that scores alone determine, hence that resamples of saved scores recompute."""
RESAMPLE_BATCH = 2_000_000
"""Bound on the scores of one batch of resamples (memory)."""


def _roc(S: np.ndarray, lab: np.ndarray, levels: Sequence[float]) -> tuple[dict[str, np.ndarray], dict]:
    """``score_metrics`` of ``S`` [B, N], and per level the cut it chose: (index in each row's descending order
    of the last point called a member, −1 for none; that row's sorted scores, true and false positive counts)."""
    m, n = int(lab.sum()), int((~lab).sum())
    from scipy.stats import rankdata  # here: importing scipy.stats costs 0.8 s, and registering needs none

    ranks = rankdata(S, axis=1)
    out = {"auc": (ranks[:, lab].sum(axis=1) - m * (m + 1) / 2) / (m * n)}
    order = np.argsort(-S, axis=1, kind="stable")
    s_sorted = np.take_along_axis(S, order, axis=1)
    l_sorted = lab[order]
    tp = np.cumsum(l_sorted, axis=1)
    fp = np.cumsum(~l_sorted, axis=1)
    tpr, fpr = tp / m, fp / n
    cut = np.ones_like(s_sorted, dtype=bool)  # a threshold can fall after position i only between distinct scores
    cut[:, :-1] = s_sorted[:, :-1] != s_sorted[:, 1:]
    out["advantage"] = np.maximum(np.where(cut, tpr - fpr, -np.inf).max(axis=1), 0.0)
    picks = {}
    for level in levels:
        ok = cut & (fpr <= level + 1e-12)
        best = np.where(ok, tpr, 0.0).max(axis=1)
        out[tpr_key(level)] = best
        # the first cut (fewest false positives) reaching the best TPR; none (-1) when that TPR is 0
        first = np.argmax(ok & (tpr == best[:, None]), axis=1)
        picks[level] = np.where(best > 0, first, -1)
    return out, {"cuts": picks, "scores": s_sorted, "tp": tp, "fp": fp, "m": m, "n": n}


def score_metrics(scores: np.ndarray, is_member: np.ndarray, levels: Sequence[float]) -> dict[str, np.ndarray]:
    """AUC, advantage and TPR at each FPR in ``levels`` of every row of ``scores`` [B, N] (members where
    ``is_member`` [N] is true; higher means member), each an array [B].

    AUC is the Mann–Whitney statistic (ties count one half); a threshold falls only between distinct scores, so
    the advantage is max(TPR − FPR, 0) and the TPR at an FPR the largest TPR of a threshold whose FPR does not
    exceed it, over every such threshold."""
    S = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    return _roc(S, np.asarray(is_member, dtype=bool).reshape(-1), levels)[0]


def operating_points(scores: np.ndarray, is_member: np.ndarray,
                     levels: Sequence[float]) -> dict[str, dict[str, float | int | None]]:
    """The operating point behind each ``tpr@X%fpr`` of one score vector, as ``score_metrics`` chose it (the same
    computation): ``{"threshold", "fpr", "false_positives", "nonmembers", "true_positives", "members"}``.

    A point is called a member when its score is at least ``threshold``, the lowest score still called a member at
    the chosen cut (cuts fall only between distinct scores, so the rule reproduces the counts exactly); of the cuts
    reaching the TPR, the one with the fewest false positives. ``threshold`` is None when the best TPR at that FPR
    is 0: no point is called a member (0 true and 0 false positives)."""
    S = np.asarray(scores, dtype=np.float64).reshape(1, -1)
    _, roc = _roc(S, np.asarray(is_member, dtype=bool).reshape(-1), levels)
    out = {}
    for level in levels:
        i = int(roc["cuts"][level][0])
        tp, fp = (0, 0) if i < 0 else (int(roc["tp"][0, i]), int(roc["fp"][0, i]))
        out[tpr_key(level)] = {"threshold": None if i < 0 else float(roc["scores"][0, i]), "fpr": fp / roc["n"],
                               "false_positives": fp, "nonmembers": roc["n"], "true_positives": tp,
                               "members": roc["m"]}
    return out


def membership_scores(scores: np.ndarray, is_member: np.ndarray,
                      decisions: np.ndarray) -> tuple[dict, list[str], dict[str, dict]]:
    """``membership_metrics`` with the operating point (``operating_points``) of each TPR@FPR it reports (those
    the non-members resolve): (metrics, notes, metric name → operating point)."""
    metrics, notes = membership_metrics(scores, is_member, decisions)
    wanted = [level for level in FPR_LEVELS if metrics.get(tpr_key(level)) is not None]
    points = operating_points(scores, is_member, wanted) if wanted else {}
    for key, point in points.items():  # one computation: the point's counts give the metric itself
        assert point["true_positives"] == round(metrics[key] * point["members"]), key
    return metrics, notes, points


def membership_metrics(scores: np.ndarray, is_member: np.ndarray, decisions: np.ndarray) -> tuple[dict, list[str]]:
    """AUC, advantage, balanced accuracy and TPR at fixed FPRs; plus notes on what the sample cannot resolve.

    ``scores`` are higher-means-member, ``decisions`` the attack's own hard guesses.
    """
    is_member = np.asarray(is_member, dtype=bool)
    scores = np.asarray(scores, dtype=np.float64)
    decisions = np.asarray(decisions, dtype=bool)
    n_in, n_out = int(is_member.sum()), int((~is_member).sum())
    if n_in == 0 or n_out == 0:
        raise ValueError(f"membership metrics need members and non-members, got {n_in} and {n_out}")
    if not np.all(np.isfinite(scores)):
        raise ValueError("membership scores contain NaN or infinity")
    found = score_metrics(scores[None], is_member, FPR_LEVELS)
    tpr_hit = decisions[is_member].mean()
    tnr_hit = (~decisions[~is_member]).mean()
    metrics: dict[str, float | int | None] = {
        "auc": float(found["auc"][0]),
        "advantage": float(found["advantage"][0]),
        "balanced_accuracy": float((tpr_hit + tnr_hit) / 2),
        "n_members": n_in,
        "n_nonmembers": n_out,
    }
    notes = []
    for level in FPR_LEVELS:
        if level * n_out < 1:
            metrics[tpr_key(level)] = None
            notes.append(
                f"{tpr_key(level)} not measurable: {n_out} non-members resolve FPR only to {1 / n_out:.2%}"
            )
        else:
            metrics[tpr_key(level)] = float(found[tpr_key(level)][0])
    return metrics, notes


def resamplable(metric: str) -> bool:
    """Whether resamples of saved scores recompute ``metric``."""
    return metric in SCORE_METRICS or (metric.startswith("tpr@") and fpr_level(metric) is not None)


def weighted_rates(scores: np.ndarray, is_member: np.ndarray, weights: np.ndarray,
                   levels: Sequence[float]) -> dict[str, np.ndarray]:
    """AUC, advantage and TPR at each FPR in ``levels`` of the scores [N] (members where ``is_member``), each point
    counted ``weights[b, i]`` times in row b of ``weights`` [B, N], each an array [B]: the metrics of B resamples
    given as multiplicities, from ONE sort of the scores (a resample only reweights the sorted points). As
    ``score_metrics``: AUC by Mann–Whitney with ties counting one half, a threshold only between distinct scores.

    Everything is computed per group of equal scores (the thresholds fall between groups), in descending order:
    the member and non-member weight of each group, their running sums (the TPR and FPR at each threshold), and,
    as both rise along a row, the TPR at an FPR level is the one at the last threshold within it. Integer weights
    (``multiplicities``) stay integers until the rates."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    return _sorted_rates(np.asarray(scores, dtype=np.float64)[order], np.asarray(is_member, dtype=bool)[order],
                         np.asarray(weights)[:, order], levels)


def _sorted_rates(s: np.ndarray, lab: np.ndarray, W: np.ndarray, levels: Sequence[float]) -> dict[str, np.ndarray]:
    """``weighted_rates`` of scores ``s`` already in descending order (labels and weights in the same order)."""
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]]) if len(s) else np.zeros(0, np.intp)  # first of a group
    Mg = np.where(lab, W, 0)  # per group: member weight, non-member weight
    Ng = W - Mg
    if len(starts) < len(s):  # ties: sum each group of equal scores
        Mg, Ng = np.add.reduceat(Mg, starts, axis=1), np.add.reduceat(Ng, starts, axis=1)
    cum_m, cum_n = np.cumsum(Mg, axis=1), np.cumsum(Ng, axis=1)
    m, n = cum_m[:, -1].astype(np.float64), cum_n[:, -1].astype(np.float64)
    tpr = cum_m / np.maximum(m, 1e-300)[:, None]
    fpr = cum_n / np.maximum(n, 1e-300)[:, None]
    below = n[:, None] - cum_n  # non-member weight strictly below each group (descending order)
    out = {"auc": (Mg * (below + 0.5 * Ng)).sum(axis=1) / np.maximum(m * n, 1e-300),
           "advantage": np.maximum((tpr - fpr).max(axis=1), 0.0)}
    rows = np.arange(len(W))
    for level in levels:
        within = (fpr <= level + 1e-12).sum(axis=1)  # thresholds within the level: a prefix of each row
        out[tpr_key(level)] = np.where(within > 0, tpr[rows, np.maximum(within - 1, 0)], 0.0)
    return out


def multiplicities(rng: np.random.Generator, b: int, n: int) -> np.ndarray:
    """[b, n]: how many times each of n points is drawn in each of b resamples of n draws with replacement."""
    idx = rng.integers(0, n, (b, n)) + (np.arange(b) * n)[:, None]
    return np.bincount(idx.reshape(-1), minlength=b * n).reshape(b, n)


def bootstrap_metrics(scores: np.ndarray, is_member: np.ndarray, metrics: Sequence[str], *, resamples: int = 1000,
                      seed: int = 0) -> dict[str, np.ndarray]:
    """Each metric of ``metrics`` that scores determine (AUC, advantage, TPR@FPR) on ``resamples`` stratified
    bootstrap resamples of one matchup's challenge points: members and non-members are each drawn with
    replacement, so every resample keeps the counts (and the FPR resolution) of the game played. The resamples are
    multiplicities of the points (``weighted_rates``: one sort, not one per resample)."""
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    lab = np.asarray(is_member).astype(bool).reshape(-1)
    rng = np.random.default_rng(seed)
    out: dict[str, list[np.ndarray]] = {}
    levels = tuple(sorted({level for m in metrics if (level := fpr_level(m)) is not None}))
    chunk = max(1, min(resamples, RESAMPLE_BATCH // max(1, len(scores))))
    order = np.argsort(-scores, kind="stable")  # the one sort; each resample's multiplicities follow it
    s, lab = scores[order], lab[order]
    done = 0
    while done < resamples:
        b = min(chunk, resamples - done)
        W = np.empty((b, len(s)), np.int32)
        W[:, lab] = multiplicities(rng, b, int(lab.sum()))
        W[:, ~lab] = multiplicities(rng, b, int((~lab).sum()))
        for k, v in _sorted_rates(s, lab, W, levels).items():
            out.setdefault(k, []).append(v)
        done += b
    return {k: np.concatenate(v) for k, v in out.items() if k in metrics}


def resample(arrays: Mapping[str, Any], metrics: Sequence[str], *, resamples: int,
             seed: int) -> dict[str, np.ndarray] | None:
    """The game's ``resample``: bootstrap draws of each metric of ``metrics`` that the matchup's saved ``scores``
    and ``is_member`` determine; None when they were not saved (or hold no member or no non-member)."""
    if arrays is None or "scores" not in arrays or "is_member" not in arrays:
        return None
    lab = np.asarray(arrays["is_member"]).astype(bool).reshape(-1)
    if lab.all() or not lab.any():
        return None
    wanted = [m for m in metrics if resamplable(m)]
    return bootstrap_metrics(arrays["scores"], lab, wanted, resamples=resamples, seed=seed) if wanted else {}
