"""Tiny training tasks for the defense tests: digits records, a small MLP or CNN, three models, a few epochs."""

from __future__ import annotations

import functools

import torch
from sklearn.datasets import load_digits

from arena.contracts.defense import Defense, FitTask
from arena.engine.augment import Augment
from arena.engine.recipe import Recipe
from tests.conftest import architecture


@functools.cache
def digits() -> tuple[torch.Tensor, torch.Tensor]:
    d = load_digits()
    return torch.tensor(d.data / 16.0, dtype=torch.float64), torch.tensor(d.target)


def digits_task(model: str = "mlp", n: int = 48, epochs: int = 3, batch_size: int | None = 16,
                augment: Augment | None = None, momentum: float = 0.9, ema: float = 0.0,
                reference: int = 24) -> FitTask:
    """Three models on three random draws of ``n`` digits, in float64 (so alone-vs-batched holds tightly), each with
    a reference set of ``reference`` other digits (outside its training set)."""
    X, y = digits()
    params = {"hidden": [16]} if model == "mlp" else {"channels": [4, 8], "hidden": 16}
    arch = architecture(model, (1, 8, 8), 10, **params)
    g = torch.Generator().manual_seed(1)
    perms = torch.stack([torch.randperm(len(y), generator=g)[: n + reference] for _ in range(3)])
    rows, ref = perms[:, :n], perms[:, n:]
    recipe = Recipe(epochs=epochs, lr=0.1, momentum=momentum, batch_size=batch_size,
                    augment=augment or Augment(), ema=ema)
    return FitTask(arch, recipe, X[rows], y[rows], torch.tensor([5, 6, 7]), torch.tensor([50, 60, 70]),
                   reference_X=X[ref] if reference else None, reference_y=y[ref] if reference else None)


def one(task: FitTask, k: int) -> FitTask:
    """Model k of ``task`` alone."""
    sl = slice(k, k + 1)
    ref = {} if task.reference_X is None else {"reference_X": task.reference_X[sl], "reference_y": task.reference_y[sl]}
    return FitTask(task.arch, task.recipe, task.X[sl], task.y[sl], task.init_seeds[sl], task.train_seeds[sl],
                   task.solver, **ref)


def assert_alone_equals_batched(defense: Defense, task: FitTask) -> None:
    """Model 1 trains the same alone as inside the batch of three (float tolerance), and the models differ."""
    batched = defense.fit(task)
    alone = defense.fit(one(task, 1))
    assert batched.state.keys() == alone.state.keys()
    for name in batched.state:
        torch.testing.assert_close(batched.state[name][1:2], alone.state[name], rtol=1e-9, atol=1e-10)
    for name in batched.answering:
        torch.testing.assert_close(batched.answering[name][1:2], alone.answering[name], rtol=1e-9, atol=1e-10)
    first = next(n for n in batched.state if batched.state[n].is_floating_point())
    assert not torch.allclose(batched.state[first][0], batched.state[first][1])
