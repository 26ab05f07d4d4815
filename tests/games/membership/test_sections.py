"""Per-record risk: the membership game saves each challenge point's dataset row and label beside its score, and
the report ranks records and classes from them."""

from __future__ import annotations

import numpy as np
import pytest

from arena.games.membership.sections import class_level, per_class_tpr, record_risk
from tests.games.membership.test_game import Spy, game, procedure  # noqa: F401 - fixtures


def test_play_saves_the_dataset_row_and_label_of_every_challenge_point(game, procedure) -> None:  # noqa: F811
    release = game.release(procedure)
    outcome = game.play(Spy(Spy.Params()), release, procedure)
    a = outcome.arrays
    assert set(a) >= {"scores", "is_member", "record", "label"}
    assert a["record"].tolist() == game.challenge.tolist()  # the dataset row of each score, in order
    assert np.array_equal(a["label"], game.dataset.y[a["record"]])
    members = set(game.members.tolist())
    assert [r in members for r in a["record"].tolist()] == a["is_member"].astype(bool).tolist()


def seed_arrays(records, scores, members, labels=None) -> dict:
    out = {"record": np.array(records), "scores": np.array(scores, float), "is_member": np.array(members, np.int8)}
    if labels is not None:
        out["label"] = np.array(labels)
    return out


def test_records_are_ranked_by_mean_percentile_over_the_seeds_they_were_members() -> None:
    # Seed 0: record 7 scores highest (rank 4/4 = 1.0), record 3 next (0.75). Seed 1: record 3 highest (1.0),
    # record 7 is a non-member there, record 5 a member at rank 0.5.
    s0 = seed_arrays([7, 3, 5, 9], [9.0, 5.0, 1.0, 0.0], [1, 1, 0, 0], [1, 0, 1, 0])
    s1 = seed_arrays([3, 7, 5, 8], [8.0, 7.0, 2.0, 1.0], [1, 0, 1, 0], [0, 1, 1, 0])
    top = record_risk([s0, s1], top=3)
    assert [r.record for r in top] == [7, 3, 5]
    assert top[0].mean_rank == 1.0 and (top[0].times_member, top[0].times_seen) == (1, 2)
    assert top[1].mean_rank == pytest.approx((0.75 + 1.0) / 2) and top[1].times_member == 2
    assert top[2].mean_rank == pytest.approx(0.5) and top[2].label == 1
    assert record_risk([{k: v for k, v in s0.items() if k != "record"}]) == []  # old runs: nothing to rank


def test_per_class_tpr_uses_the_lowest_fpr_the_class_can_resolve() -> None:
    assert class_level(100) == 0.01 and class_level(99) == 0.1 and class_level(10) == 0.1 and class_level(9) is None
    rng = np.random.default_rng(0)
    # Class 0: 200 members, 200 non-members, perfectly separated: TPR 1 at 1%. Class 1: 20 + 20, members score
    # like non-members except the top 4: at 10% FPR (2 of 20 non-members) TPR is 4/20. Class 2: 5 non-members.
    scores = np.r_[rng.normal(size=200) + 100, rng.normal(size=200),
                   np.r_[np.full(4, 50.0), np.arange(16) * 0.01], np.arange(20) * 0.01 + 0.005,
                   np.zeros(5), np.zeros(5)]
    member = np.r_[np.ones(200), np.zeros(200), np.ones(20), np.zeros(20), np.ones(5), np.zeros(5)]
    labels = np.r_[np.zeros(400), np.ones(40), np.full(10, 2)].astype(int)
    per = per_class_tpr([{"scores": scores, "is_member": member, "label": labels}])
    assert per[0][:2] == (1.0, 0.01)
    assert per[1][1] == 0.1 and per[1][0] == pytest.approx(4 / 20)  # 20 non-members cannot resolve 1%
    assert per[2] == (None, None, 5)  # never a number where the class cannot resolve 10%
