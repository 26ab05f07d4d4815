"""MemGuard (Jia et al. 2019): Phase I on a hand-made classifier, answers that keep every label (label-only access
sees the model as it is) while changing confidences, the distortion budget, validated parameters, alone-vs-batched
training, and answers that survive the training cache."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from arena.contracts.release import Answering, BlackBox, LabelOnly, Models
from arena.pipeline.procedure import TrainingProcedure
from arena.pipeline.store import TensorCache
from arena_plugins.memguard import MemGuard, MemGuardParams, decision, phase_one
from tests.plugins.tiny_tasks import assert_alone_equals_batched, digits, digits_task


@pytest.mark.parametrize("bad", [{"budget": 0.0}, {"budget": 2.5}, {"steps": 0},
                                 {"step_size": -1.0}, {"c2": float("nan")}])
def test_bad_parameters_are_refused(bad: dict) -> None:
    with pytest.raises(ValidationError):
        MemGuardParams(**bad)


def test_phase_one_crosses_the_classifiers_boundary_and_keeps_the_label() -> None:
    """g says 'member' when the top score is above 0.5 (w = e₁ on the sorted vector, b = −0.5): the noise brings
    confident answers below it and a flat one above it (g's decision changes side either way, as the paper's
    Phase I stops), stays a difference of probability vectors, and keeps each argmax."""
    C = 4
    w = torch.zeros(1, C, 1, dtype=torch.float64)
    w[0, 0, 0] = 1.0
    b = torch.tensor([[-0.5]], dtype=torch.float64)
    z = torch.tensor([[[4.0, 0.0, 0.5, -1.0], [0.0, 0.2, 3.0, 0.1], [0.0, 0.1, 0.2, 0.3]]], dtype=torch.float64)
    s = z.softmax(-1)
    e = phase_one(z, w, b, MemGuardParams(steps=40, step_size=0.2))
    before, after = decision(s, w, b), decision(s + e, w, b)
    assert bool((before[0, :2] > 0).all()) and bool((after[0, :2] <= 0).all())
    assert before[0, 2] < 0 < after[0, 2]
    assert torch.equal((s + e).argmax(-1), s.argmax(-1))
    torch.testing.assert_close(e.sum(-1), torch.zeros(1, 3, dtype=torch.float64))
    assert bool(((s + e) >= 0).all())
    far = phase_one(z, w, b - 10.0, MemGuardParams(steps=5, step_size=0.05))  # no boundary within reach: e = 0
    assert float(far.abs().max()) == 0.0


@pytest.fixture(scope="module")
def fitted() -> tuple:
    task = digits_task(n=80, epochs=15)
    return task, MemGuard(MemGuardParams()).fit(task)


@pytest.mark.slow
def test_answers_keep_every_label_and_change_confidences(fitted: tuple) -> None:
    task, fit = fitted
    raw = Models(task.arch, fit.state)
    guarded = Models(task.arch, fit.state, Answering(MemGuard(MemGuardParams()).answer, fit.answering))
    X = torch.cat([task.X[0], digits()[0][-200:]])
    p, p_raw = BlackBox(guarded.select(0)).predict_proba(X), BlackBox(raw.select(0)).predict_proba(X)
    assert torch.equal(LabelOnly(guarded.select(0)).predict(X), LabelOnly(raw.select(0)).predict(X))
    torch.testing.assert_close(p.sum(-1), torch.ones(len(X), dtype=p.dtype))
    changed = (p - p_raw).abs().sum(-1) > 1e-6
    assert float(changed.double().mean()) > 0.1
    tiny = Models(task.arch, fit.state, Answering(MemGuard(MemGuardParams(budget=1e-6)).answer, fit.answering))
    assert float(((tiny.predict_proba(X)[0] - p_raw).abs().sum(-1) > 1e-6).double().mean()) < 0.02


@pytest.mark.slow
def test_memguard_trains_alone_as_in_a_batch() -> None:
    assert_alone_equals_batched(MemGuard(MemGuardParams()), digits_task())


@pytest.mark.slow
def test_cached_models_answer_through_the_defense(tmp_path: Path) -> None:
    """The classifier's weights are cached with the models: a cache hit answers exactly as the fresh fit."""
    task = digits_task(epochs=2)
    defense = MemGuard(MemGuardParams(steps=20))
    make = lambda: TrainingProcedure(defense, task.arch, task.recipe, cache=TensorCache(tmp_path))  # noqa: E731
    reference = task.reference_X, task.reference_y
    first, _ = make()(task.X, task.y, task.init_seeds, task.train_seeds, *reference)
    again = make()
    second, _ = again(task.X, task.y, task.init_seeds, task.train_seeds, *reference)
    assert again.stats.cached == task.k and second.answering is not None
    X = digits()[0][:50]
    torch.testing.assert_close(first.logits(X), second.logits(X))
    assert not torch.allclose(second.logits(X).softmax(-1), Models(task.arch, second.state).predict_proba(X))
    pooled = Models.cat([second.select(2), second.select(0)])
    torch.testing.assert_close(pooled.logits(X), second.logits(X)[[2, 0]])
