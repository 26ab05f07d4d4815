"""Membership metrics agree with scikit-learn on fixed scores and with a hand computation."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score, roc_curve

from arena.contracts.metric import tpr_at_fpr
from arena.games.membership.metrics import membership_metrics


def test_hand_computed_case() -> None:
    # members score 4, 3, 1; non-members 2, 0, -1. Pairs won by members: 4>all3, 3>all3, 1>{0,-1} -> 8/9.
    scores = np.array([4, 3, 1, 2, 0, -1], dtype=float)
    member = np.array([1, 1, 1, 0, 0, 0], dtype=bool)
    decisions = scores > 1.5  # TPR 2/3, TNR 2/3
    m, notes = membership_metrics(scores, member, decisions)
    assert m["auc"] == pytest.approx(8 / 9)
    assert m["balanced_accuracy"] == pytest.approx(2 / 3)
    # thresholds: >=3 gives TPR 2/3, FPR 0 -> advantage 2/3 (the max)
    assert m["advantage"] == pytest.approx(2 / 3)
    assert m["n_members"] == 3 and m["n_nonmembers"] == 3
    assert m["tpr@10%fpr"] is None and m["tpr@1%fpr"] is None and len(notes) == 3


def test_agrees_with_sklearn_on_random_scores() -> None:
    rng = np.random.default_rng(0)
    member = rng.random(4000) < 0.5
    scores = rng.normal(size=4000) + 0.7 * member
    m, notes = membership_metrics(scores, member, scores > 0)
    fpr, tpr, _ = roc_curve(member, scores)
    assert m["auc"] == pytest.approx(roc_auc_score(member, scores), abs=1e-12)
    assert m["advantage"] == pytest.approx(np.max(tpr - fpr))
    for level, key in ((0.1, "tpr@10%fpr"), (0.01, "tpr@1%fpr"), (0.001, "tpr@0.1%fpr")):
        assert m[key] == pytest.approx(tpr[fpr <= level].max())
        assert m[key] == pytest.approx(np.interp(level, fpr, tpr), abs=0.01)
    assert notes == []


def test_tpr_at_fpr_picks_the_best_point_not_above_the_level() -> None:
    fpr = np.array([0.0, 0.005, 0.02, 1.0])
    tpr = np.array([0.0, 0.3, 0.6, 1.0])
    assert tpr_at_fpr(fpr, tpr, 0.01) == 0.3
    assert tpr_at_fpr(fpr, tpr, 0.001) == 0.0


@pytest.mark.parametrize("scores,member", [
    (np.array([1.0, 2.0]), np.array([True, True])),
    (np.array([np.nan, 2.0]), np.array([True, False])),
])
def test_empty_class_or_nan_is_an_error_not_a_number(scores, member) -> None:
    with pytest.raises(ValueError):
        membership_metrics(scores, member, scores > 0)
