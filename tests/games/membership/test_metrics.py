"""Membership metrics agree with scikit-learn on fixed scores and with a hand computation; the leaderboard's
vectorised computation is the same function, so a row's number and its bootstrap draws are one formula; the
game's ``resample`` bootstraps a matchup's saved scores keeping its counts."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score, roc_curve

from arena.contracts.metric import fpr_level, tpr_at_fpr
from arena.games.membership.game import MembershipGame
from arena.games.membership.metrics import (
    bootstrap_metrics,
    membership_metrics,
    membership_scores,
    operating_points,
    resample,
    score_metrics,
)


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


def test_vectorised_score_metrics_are_the_games_metrics_row_by_row() -> None:
    rng = np.random.default_rng(1)
    for n_in, n_out in ((50, 50), (120, 300)):
        member = np.r_[np.ones(n_in, bool), np.zeros(n_out, bool)]
        batch = np.round(rng.normal(size=(5, n_in + n_out)) + 0.7 * member, 1)  # many ties
        got = score_metrics(batch, member, (0.1, 0.01))
        for b, scores in enumerate(batch):
            expected, _ = membership_metrics(scores, member, scores > 0)
            for name in ("auc", "advantage", "tpr@10%fpr", "tpr@1%fpr"):
                if expected[name] is not None:
                    assert got[name][b] == expected[name], name  # one formula: the same number, not a close one
            assert expected["auc"] == pytest.approx(roc_auc_score(member, scores), abs=1e-12)


def test_tpr_at_fpr_counts_every_threshold_between_distinct_scores() -> None:
    # Tied pairs (one member, one non-member) at each of 20 scores: the ROC points (k/20, k/20) lie on one line,
    # which scikit-learn's roc_curve thins out (drop_intermediate); a threshold still reaches (0.1, 0.1).
    scores = np.repeat(np.arange(20.0), 2)
    member = np.tile([True, False], 20)
    m, _ = membership_metrics(scores, member, scores > 9)
    assert m["tpr@10%fpr"] == pytest.approx(0.1)
    fpr, tpr, _ = roc_curve(member, scores)
    assert tpr_at_fpr(fpr, tpr, 0.1) == pytest.approx(0.05)  # what the thinned curve says


def test_bootstrap_keeps_the_counts_and_is_seeded() -> None:
    member = np.r_[np.ones(100, bool), np.zeros(100, bool)]
    perfect = np.r_[np.full(100, 5.0), np.zeros(100)] + np.arange(200) * 1e-3
    draws = bootstrap_metrics(perfect, member, ["auc", "tpr@1%fpr"], resamples=200, seed=3)
    # Stratified: every resample still has members and non-members, so a perfect separation stays perfect.
    assert np.all(draws["auc"] == 1.0) and np.all(draws["tpr@1%fpr"] == 1.0)
    noisy = np.random.default_rng(0).normal(size=200) + member
    a = bootstrap_metrics(noisy, member, ["auc"], resamples=300, seed=7)["auc"]
    b = bootstrap_metrics(noisy, member, ["auc"], resamples=300, seed=7)["auc"]
    assert np.array_equal(a, b) and a.std() > 0.01


def test_the_games_resample_draws_what_scores_determine_and_nothing_else() -> None:
    assert MembershipGame.resample == "arena.games.membership.vulnerable:resample"  # the population part is this
    assert (MembershipGame.primary_metric, MembershipGame.rank_metric) == ("auc", "tpr@1%fpr")
    member = np.r_[np.ones(50, np.int8), np.zeros(50, np.int8)]
    scores = np.random.default_rng(2).normal(size=100) + member
    arrays = {"scores": scores, "is_member": member}
    draws = resample(arrays, ["auc", "balanced_accuracy", "tpr@10%fpr", "n_members"], resamples=50, seed=4)
    assert set(draws) == {"auc", "tpr@10%fpr"} and all(len(v) == 50 for v in draws.values())
    expected = bootstrap_metrics(scores, member, ["auc", "tpr@10%fpr"], resamples=50, seed=4)
    assert all(np.array_equal(draws[k], expected[k]) for k in draws)
    assert resample({"scores": scores}, ["auc"], resamples=10, seed=0) is None  # nothing saved to resample
    assert resample({"scores": scores, "is_member": np.ones(100)}, ["auc"], resamples=10, seed=0) is None
    assert resample(arrays, ["balanced_accuracy"], resamples=10, seed=0) == {}


def test_operating_points_match_a_hand_computation() -> None:
    # 10 members score 20..11; 100 non-members score 0..99 / 10 (0.0, 0.1, ..., 9.9), and one non-member 15.5.
    members = np.arange(20.0, 10.0, -1.0)
    nonmembers = np.r_[np.arange(100) / 10, 15.5]
    scores = np.r_[members, nonmembers]
    member = np.r_[np.ones(10, bool), np.zeros(101, bool)]
    metrics, _, points = membership_scores(scores, member, scores > 12)
    # 1 % of 101 non-members allows 1 false positive: the cut after score 11 (every member, the 15.5 non-member)
    one = points["tpr@1%fpr"]
    assert one == {"threshold": 11.0, "fpr": 1 / 101, "false_positives": 1, "nonmembers": 101,
                   "true_positives": 10, "members": 10}
    assert metrics["tpr@1%fpr"] == 1.0
    # 10 % allows 10 false positives, but no more members are to be had: the fewest false positives reaching TPR 1
    assert points["tpr@10%fpr"]["threshold"] == 11.0 and points["tpr@10%fpr"]["false_positives"] == 1
    # 0.1 % of 101 non-members cannot be resolved: neither the metric nor its operating point is reported
    assert metrics["tpr@0.1%fpr"] is None and "tpr@0.1%fpr" not in points
    # at FPR 0 (no false positive allowed): members 20..16 only, threshold 16
    (zero,) = operating_points(scores, member, (0.0,)).values()
    assert zero == {"threshold": 16.0, "fpr": 0.0, "false_positives": 0, "nonmembers": 101, "true_positives": 5,
                    "members": 10}


def test_an_operating_point_applied_to_the_scores_reproduces_the_tpr_and_the_false_positives() -> None:
    rng = np.random.default_rng(5)
    member = rng.random(3000) < 0.5
    scores = np.round(rng.normal(size=3000) + 1.2 * member, 2)  # many ties: cuts only between distinct scores
    metrics, _, points = membership_scores(scores, member, scores > 0)
    assert set(points) == {k for k in ("tpr@10%fpr", "tpr@1%fpr", "tpr@0.1%fpr") if metrics[k] is not None}
    for key, p in points.items():
        called = scores >= p["threshold"]
        assert int((called & member).sum()) == p["true_positives"]
        assert int((called & ~member).sum()) == p["false_positives"]
        assert p["true_positives"] / p["members"] == metrics[key]
        assert p["fpr"] == p["false_positives"] / p["nonmembers"] <= fpr_level(key)
        # the threshold sits between distinct scores: the next lower score would add a point
        below = scores[scores < p["threshold"]]
        assert below.size == 0 or (scores >= below.max()).sum() > called.sum()


def test_an_attack_with_no_true_positive_at_the_level_calls_no_point_a_member() -> None:
    scores = np.r_[np.zeros(5), np.arange(1.0, 201.0)]  # the 200 non-members all score above the 5 members
    member = np.r_[np.ones(5, bool), np.zeros(200, bool)]
    metrics, _, points = membership_scores(scores, member, scores > 0)
    assert metrics["tpr@1%fpr"] == 0.0
    assert points["tpr@1%fpr"] == {"threshold": None, "fpr": 0.0, "false_positives": 0, "nonmembers": 200,
                                   "true_positives": 0, "members": 5}


def test_a_resample_as_multiplicities_gives_the_metrics_of_the_resampled_scores() -> None:
    """``weighted_rates`` (one sort, resamples as multiplicities) equals ``score_metrics`` of the drawn points, ties
    included, so the faster bootstrap draws the same distribution."""
    from arena.games.membership.metrics import weighted_rates

    rng = np.random.default_rng(0)
    for _ in range(20):
        scores = np.round(rng.normal(size=300), 1)  # many ties
        member = rng.random(300) < 0.4
        idx = np.r_[rng.choice(np.flatnonzero(member), member.sum()), rng.choice(np.flatnonzero(~member),
                                                                                 (~member).sum())]
        drawn = score_metrics(scores[idx][None], member[idx], [0.1, 0.01])
        weighted = weighted_rates(scores, member, np.bincount(idx, minlength=300)[None].astype(float), [0.1, 0.01])
        for key, value in drawn.items():
            assert weighted[key][0] == pytest.approx(value[0], abs=1e-12), key
