"""MemGuard (Jia et al. 2019): Phase I on a hand-made classifier, answers that keep every label (label-only access
sees the model as it is) while changing confidences, the distortion budget, validated parameters, alone-vs-batched
training, and answers that survive the training cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from arena.contracts.release import Answering, BlackBox, LabelOnly, Models
from arena.pipeline.procedure import TrainingProcedure
from arena.pipeline.store import TensorCache
from arena_plugins.memguard import HIDDEN, MemGuard, MemGuardParams, classifier_layers, decision, phase_one
from tests.plugins.tiny_tasks import assert_alone_equals_batched, digits, digits_task


@pytest.mark.parametrize("bad", [{"budget": 0.0}, {"budget": 2.5}, {"steps": 0},
                                 {"step_size": -1.0}, {"c2": float("nan")}])
def test_bad_parameters_are_refused(bad: dict) -> None:
    with pytest.raises(ValidationError):
        MemGuardParams(**bad)


def top_score_classifier(bias: float = -0.5) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A hand-made g (one linear layer): 'member' when the top score is above −bias."""
    w = torch.zeros(1, 4, 1, dtype=torch.float64)
    w[0, 0, 0] = 1.0
    return [(w, torch.tensor([[bias]], dtype=torch.float64))]


def test_phase_one_stops_at_the_classifiers_boundary_and_keeps_the_label() -> None:
    """g says 'member' when the top score is above 0.5: the noise brings confident answers down to 0.5 and a flat
    one up to it, from their own side and never past it (Phase I stops at g's 0.5 output, so the answers do not
    invert the membership signal), stays a difference of probability vectors, and keeps each argmax."""
    layers = top_score_classifier()
    z = torch.tensor([[[4.0, 0.0, 0.5, -1.0], [0.0, 0.2, 3.0, 0.1], [0.0, 0.1, 0.2, 0.3]]], dtype=torch.float64)
    s = z.softmax(-1)
    e = phase_one(z, layers, MemGuardParams(steps=40, step_size=0.2))
    before, after = decision(s, layers), decision(s + e, layers)
    assert bool((before[0, :2] > 0).all()) and before[0, 2] < 0
    assert bool((after[0, :2] > 0).all()) and after[0, 2] <= 0, "never past the boundary"
    torch.testing.assert_close(after, torch.zeros_like(after), atol=1e-6, rtol=0)
    assert torch.equal((s + e).argmax(-1), s.argmax(-1))
    torch.testing.assert_close(e.sum(-1), torch.zeros(1, 3, dtype=torch.float64))
    assert bool(((s + e) >= 0).all())
    far = phase_one(z, top_score_classifier(-10.5), MemGuardParams(steps=5, step_size=0.05))  # out of reach
    assert float(far.abs().max()) == 0.0


def test_phase_one_never_changes_the_label_to_reach_the_boundary() -> None:
    """A boundary reachable only by flipping the label (top score below 1/C is impossible; below 0.26 for C = 4
    needs a near-flat vector, which the label term forbids crossing into another class's lead): e keeps every
    argmax, and rows for which no label-keeping point reaches the boundary get e = 0."""
    z = torch.tensor([[[3.0, 0.0, 0.0, 0.0], [0.0, 0.0, 2.0, 0.0]]], dtype=torch.float64)
    e = phase_one(z, top_score_classifier(-0.2501), MemGuardParams(steps=200, step_size=0.3, c2=10.0))
    s = z.softmax(-1)
    assert torch.equal((s + e).argmax(-1), s.argmax(-1))


@pytest.fixture(scope="module")
def fitted() -> tuple:
    task = digits_task(n=80, epochs=15)
    return task, MemGuard(MemGuardParams()).fit(task)


def test_the_defense_classifier_is_a_small_neural_network(fitted: tuple) -> None:
    """Jia et al.'s defense classifier: fully connected, hidden widths HIDDEN, one logit; one per model."""
    task, fit = fitted
    layers = classifier_layers(fit.answering, torch.float64)
    widths = [w.shape[1] for w, _ in layers]
    assert widths == [task.arch.n_classes, *HIDDEN][: len(widths)] and [w.shape[2] for w, _ in layers][-1] == 1
    assert len(layers) == len(HIDDEN) + 1 and all(w.shape[0] == task.k for w, _ in layers)


def auc_interval(members: np.ndarray, others: np.ndarray, draws: int = 1000) -> tuple[float, float, float]:
    """The Mann-Whitney AUC of members over non-members and its 95 % percentile-bootstrap interval."""
    def auc(a: np.ndarray, b: np.ndarray) -> float:
        return float((a[:, None] > b[None, :]).mean() + 0.5 * (a[:, None] == b[None, :]).mean())

    rng = np.random.default_rng(0)
    boot = [auc(rng.choice(members, len(members)), rng.choice(others, len(others))) for _ in range(draws)]
    return auc(members, others), float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))


@pytest.mark.slow
def test_answers_never_invert_the_threshold_attack(fitted: tuple) -> None:
    """Over a trained small model, the loss-threshold attack on MemGuard's answers (members: the model's own
    training rows; non-members: digits it never saw) is not below chance: its AUC's 95 % bootstrap interval
    reaches 0.5 or above (an inverted signal, AUC significantly below 0.5, would let the negated attack win).
    The predicted labels are the raw model's."""
    task, fit = fitted
    raw = Models(task.arch, fit.state)
    guarded = Models(task.arch, fit.state, Answering(MemGuard(MemGuardParams()).answer, fit.answering))
    X, y = digits()
    seen = set(map(tuple, task.X.reshape(-1, task.X.shape[-1]).tolist()))
    unseen = torch.tensor([i for i in range(len(y)) if tuple(X[i].tolist()) not in seen][:400])
    for k in range(task.k):
        members = -guarded.select(k).loss(task.X[k], task.y[k]).reshape(-1).numpy()
        others = -guarded.select(k).loss(X[unseen], y[unseen]).reshape(-1).numpy()
        auc, low, high = auc_interval(members, others)
        assert high >= 0.5, (k, auc, low, high)
        Q = torch.cat([task.X[k], X[unseen]])
        assert torch.equal(guarded.select(k).logits(Q).argmax(-1), raw.select(k).logits(Q).argmax(-1))


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
    declared = Models(task.arch, fit.state, Answering(MemGuard(MemGuardParams()).answer, fit.answering, True))
    assert MemGuard.answers_keep_labels, "label queries skip the answering: it must keep every label"
    assert torch.equal(declared.labels(X), guarded.logits(X).argmax(-1)), "the shortcut gives the answered labels"
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
