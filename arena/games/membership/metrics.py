"""The membership game's metrics: their declarations and their computation from scores (scikit-learn's ROC,
never hand-rolled)."""

from __future__ import annotations

import numpy as np
from sklearn.metrics import roc_auc_score, roc_curve

from arena.contracts.metric import FPR_LEVELS, UNIT, Metric, tpr_at_fpr, tpr_key

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
    fpr, tpr, _ = roc_curve(is_member, scores)
    tpr_hit = decisions[is_member].mean()
    tnr_hit = (~decisions[~is_member]).mean()
    metrics: dict[str, float | int | None] = {
        "auc": float(roc_auc_score(is_member, scores)),
        "advantage": float(np.max(tpr - fpr)),
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
            metrics[tpr_key(level)] = tpr_at_fpr(fpr, tpr, level)
    return metrics, notes
