"""Label smoothing, early stopping on the reference set and MixupMMD: validated parameters, their formulas on
hand-made inputs, and models that train the same alone or in a batch."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError

from arena.engine.ensemble import logits
from arena.engine.trainer import train
from arena_plugins.regularizers import (
    EarlyStopping,
    EarlyStoppingParams,
    LabelSmoothing,
    LabelSmoothingParams,
    MixupMMD,
    MixupMMDParams,
    class_mmd,
)
from tests.plugins.tiny_tasks import assert_alone_equals_batched, digits_task


@pytest.mark.parametrize(("cls", "bad"), [
    (LabelSmoothingParams, {"smoothing": 0.0}), (LabelSmoothingParams, {"smoothing": 1.0}),
    (LabelSmoothingParams, {"smoothing": float("nan")}), (LabelSmoothingParams, {}),
    (EarlyStoppingParams, {"patience": 0}), (MixupMMDParams, {"lam": -1.0}),
    (MixupMMDParams, {"bandwidth": 0.0}), (MixupMMDParams, {"l2": 0.1}),
])
def test_bad_parameters_are_refused(cls: type, bad: dict) -> None:
    with pytest.raises(ValidationError):
        cls(**bad)


def test_class_mmd_matches_its_formula_on_hand_made_outputs() -> None:
    """One point per side in class 0: MMD² = k(p,p) + k(q,q) − 2k(p,q) = 2 − 2·exp(−||p−q||²/2σ²); identical
    sets give 0; a class on one side only is left out; padded rows (weight 0) count for nothing."""
    p = torch.tensor([[[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]]], dtype=torch.float64)
    q = torch.tensor([[[0.5, 0.3, 0.2]]], dtype=torch.float64)
    yp, yq = torch.tensor([[0, 2]]), torch.tensor([[0]])
    sigma = 0.5
    expected = 2 - 2 * math.exp(-((p[0, 0] - q[0, 0]) ** 2).sum().item() / (2 * sigma**2))
    torch.testing.assert_close(class_mmd(p, yp, q, yq, sigma), torch.tensor([expected], dtype=torch.float64))
    torch.testing.assert_close(class_mmd(p, yp, p, yp, sigma), torch.zeros(1, dtype=torch.float64))
    padded = class_mmd(torch.cat([p, q], 1), torch.tensor([[0, 2, 0]]), q, yq, sigma,
                       torch.tensor([[True, True, False]]))
    torch.testing.assert_close(padded, torch.tensor([expected], dtype=torch.float64))


@pytest.mark.slow
def test_label_smoothing_trains_alone_as_in_a_batch() -> None:
    assert_alone_equals_batched(LabelSmoothing(LabelSmoothingParams(smoothing=0.1)), digits_task())


def test_label_smoothing_takes_the_gradient_of_torchs_smoothed_cross_entropy() -> None:
    """One full-batch step of plain SGD equals one step on F.cross_entropy(label_smoothing=ε)."""
    task = digits_task(epochs=1, batch_size=None, momentum=0.0)
    fit = LabelSmoothing(LabelSmoothingParams(smoothing=0.2)).fit(task)
    ensemble = task.ensemble()
    loss = sum(F.cross_entropy(out, y, label_smoothing=0.2) for out, y in zip(ensemble(task.X), task.y))
    loss.backward()
    for (name, p) in ensemble.state().items():
        torch.testing.assert_close(fit.state[name], p.detach() - task.recipe.lr * p.grad)


@pytest.mark.slow
def test_mixup_mmd_trains_alone_as_in_a_batch() -> None:
    assert_alone_equals_batched(MixupMMD(MixupMMDParams()), digits_task())


@pytest.mark.slow
def test_early_stopping_releases_the_epoch_with_the_lowest_reference_loss() -> None:
    """With patience past the last epoch, the release is the engine's training on every member for the number of
    epochs (0..E) whose loss on the reference set is lowest, per model."""
    E = 4
    task = digits_task(epochs=E)
    fit = EarlyStopping(EarlyStoppingParams(patience=E + 1)).fit(task)
    Xk, yk, Xh, yh = task.X, task.y, task.reference_X, task.reference_y
    runs = [train(task.arch, Xk, yk, dataclasses.replace(task.recipe, epochs=e), task.init_seeds, task.train_seeds)
            for e in range(E + 1)]
    assert Xh is not None and yh is not None
    losses = torch.stack([F.cross_entropy(logits(task.arch, s, Xh).transpose(1, 2), yh, reduction="none").mean(1)
                          for s in runs])  # [E + 1, K]
    best = losses.argmin(dim=0)
    for k in range(task.k):
        for name, t in fit.state.items():
            torch.testing.assert_close(t[k], runs[int(best[k])][name][k], rtol=1e-7, atol=1e-9)


@pytest.mark.slow
def test_early_stopping_trains_alone_as_in_a_batch() -> None:
    assert_alone_equals_batched(EarlyStopping(EarlyStoppingParams(patience=1)), digits_task())
