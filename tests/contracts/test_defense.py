"""The defense contract's plain-PyTorch side: ``FitTask.ensemble()`` and ``minibatches()`` give a defense the
engine's own models and batches, so K models trained with ``torch.optim`` equal the engine's ``train``."""

from __future__ import annotations

import pytest
import torch

from arena.contracts.defense import Fit, FitTask
from arena.engine.augment import Augment
from arena.engine.ensemble import init_state, logits
from arena.engine.recipe import Recipe
from arena.engine.trainer import train
from tests.conftest import architecture

ARCH = architecture("cnn", (1, 6, 6), 3, channels=[3], hidden=8, l2=0.01)
RECIPE = Recipe(epochs=2, lr=0.05, momentum=0.9, batch_size=5, augment=Augment(crop=1, flip=True))


def _task(K: int = 3, n: int = 12) -> FitTask:
    g = torch.Generator().manual_seed(0)
    X = torch.rand(K, n, 36, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (K, n), generator=g)
    return FitTask(ARCH, RECIPE, X, y, torch.arange(K) + 1, torch.arange(K) + 20)


def test_the_ensemble_starts_from_the_engines_initialisation_and_computes_its_logits():
    task = _task()
    ensemble = task.ensemble()
    start = init_state(ARCH, task.init_seeds, torch.float64)
    assert list(ensemble.state()) == list(start)
    assert all(torch.equal(ensemble.state()[k], start[k]) for k in start)
    X = task.X[:, :4]
    torch.testing.assert_close(ensemble(X), logits(ARCH, start, X), rtol=1e-12, atol=1e-12)
    assert {id(p) for p in ensemble.penalised()} == {id(ensemble.state()[k]) for k in ("0.weight", "5.weight",
                                                                                        "7.weight")}


def test_minibatches_are_images_with_the_recipes_schedule():
    task = _task()
    steps = list(task.minibatches())
    assert len(steps) == RECIPE.epochs * 3  # 12 records in batches of 5, 5, 2
    assert [tuple(Xb.shape) for Xb, _, _ in steps[:3]] == [(3, 5, 1, 6, 6), (3, 5, 1, 6, 6), (3, 2, 1, 6, 6)]
    assert all(valid is None for _, _, valid in steps)
    poisson = list(task.minibatches(poisson=True))
    assert all(valid is not None and valid.shape == Xb.shape[:2] for Xb, _, valid in poisson)


@pytest.mark.slow
def test_plain_torch_training_of_the_ensemble_equals_the_engine():
    """Sum of the K mean losses, (l2/2)||w||² on the penalised tensors, torch.optim.SGD with momentum, the
    task's (augmented) minibatches: exactly what ``train`` does, model by model."""
    task = _task()
    ensemble = task.ensemble()
    opt = torch.optim.SGD([p for p in ensemble.parameters() if p.requires_grad], lr=RECIPE.lr,
                          momentum=RECIPE.momentum)
    for Xb, yb, _ in task.minibatches():
        opt.zero_grad()
        out = ensemble(Xb)
        loss = torch.nn.functional.cross_entropy(out.flatten(0, 1), yb.flatten(), reduction="none")
        penalty = sum(p.square().sum() for p in ensemble.penalised())
        (loss.reshape(yb.shape).mean(1).sum() + 0.5 * ARCH.l2 * penalty).backward()
        opt.step()
    fit = Fit.of(ensemble)
    engine = train(ARCH, task.X, task.y, RECIPE, task.init_seeds, task.train_seeds, engine="functional")
    assert fit.claim is None and list(fit.state) == list(engine)
    for name in engine:
        torch.testing.assert_close(fit.state[name], engine[name], rtol=1e-9, atol=1e-9, msg=name)
    assert not any(t.requires_grad for t in fit.state.values())
