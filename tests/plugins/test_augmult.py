"""DP-SGD with augmentation multiplicity (De et al. 2022): the claim is dpsgd's, M = 1 is dpsgd, the clipped
gradient is the average over a record's views, alone-vs-batched training, and the refusals."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from arena.contracts.spec import TrainingSpec
from arena.engine.augment import Augment
from arena.engine.functional import clipped_sum
from arena.engine.multiplicity import averaged_clipped_sum
from arena.pipeline.honours import unmet
from arena_plugins.augmult import AugMultDPSGD, AugMultParams
from arena_plugins.defenses import DPSGD, DPSGDParams
from tests.plugins.tiny_tasks import assert_alone_equals_batched, digits_task

DP = {"epsilons": [4.0], "delta": 1e-3, "clip": 1.0}


def _task():
    return digits_task("cnn", n=40, epochs=2, augment=Augment(crop=1, flip=True))


@pytest.mark.parametrize("bad", [{"multiplicity": 0}, {"multiplicity": 65}, {"multiplicity": 2.5}])
def test_bad_multiplicity_is_refused(bad: dict) -> None:
    with pytest.raises(ValidationError):
        AugMultParams(**DP, **bad)


@pytest.mark.slow
def test_the_clipped_gradient_is_the_average_over_the_views() -> None:
    """M identical views: the engine's per-example clipped sum. Two different views: the clip of their mean (the
    per-view gradients computed one at a time), not the mean of their clips."""
    task = _task()
    ens = task.ensemble()
    state = {k: v.detach() for k, v in ens.state().items()}
    X = task.X[:, :5].reshape(task.k, 5, 1, 8, 8)
    y = task.y[:, :5]
    same = averaged_clipped_sum(task.arch, state, {}, X.unsqueeze(2).expand(-1, -1, 3, -1, -1, -1), y, None, 0.5, 4)
    engine = clipped_sum(task.arch, state, {}, X, y, None, 0.5, 4, method="vmap")
    for k in engine:
        torch.testing.assert_close(same[k], engine[k])
    views = torch.stack([X, X.flip(-1)], dim=2)
    got = averaged_clipped_sum(task.arch, state, {}, views[:, :1], y[:, :1], None, 0.5, 4)
    per_view = [clipped_sum(task.arch, state, {}, views[:, :1, j], y[:, :1], None, 1e9, 4, method="vmap")
                for j in range(2)]
    mean = {k: (per_view[0][k] + per_view[1][k]) / 2 for k in per_view[0]}
    norm = torch.sqrt(sum(t.reshape(task.k, -1).square().sum(-1) for t in mean.values()))
    for k in mean:
        scale = (0.5 / norm).clamp(max=1.0).reshape(-1, *([1] * (mean[k].ndim - 1)))
        torch.testing.assert_close(got[k], mean[k] * scale)


@pytest.mark.slow
def test_claim_is_dpsgds_and_multiplicity_one_is_dpsgd() -> None:
    task = _task()
    plain = DPSGD(DPSGDParams(**DP)).fit(task)
    one = AugMultDPSGD(AugMultParams(**DP, multiplicity=1)).fit(task)
    four = AugMultDPSGD(AugMultParams(**DP, multiplicity=4)).fit(task)
    assert one.claim == plain.claim and four.claim == plain.claim
    for k in plain.state:
        torch.testing.assert_close(one.state[k], plain.state[k], rtol=1e-7, atol=1e-9)
    assert not torch.allclose(four.state["0.weight"], plain.state["0.weight"])


@pytest.mark.slow
def test_augmult_trains_alone_as_in_a_batch() -> None:
    assert_alone_equals_batched(AugMultDPSGD(AugMultParams(**DP, multiplicity=3)), _task())


def test_a_scenario_without_augmentation_is_refused_at_its_field() -> None:
    plain = TrainingSpec(epochs=2, lr=0.1)
    (problem,) = unmet("s.yaml", "tracks[0]", 1, AugMultDPSGD, plain, 0.0)
    assert problem.startswith("s.yaml: tracks[0].training.augment: defense 'dpsgd-augmult' (tracks[0].defenses[1])")
    assert unmet("s.yaml", "tracks[0]", 1, AugMultDPSGD, TrainingSpec(epochs=2, lr=0.1, augment={"flip": True}),
                 0.0) == []
    assert unmet("s.yaml", "tracks[0]", 0, DPSGD, plain, 0.0) == []


def test_augmult_needs_augmentation() -> None:
    with pytest.raises(ValueError, match="training.augment"):
        AugMultDPSGD(AugMultParams(**DP)).fit(digits_task("cnn", n=16, epochs=1))
