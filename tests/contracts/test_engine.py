"""The contracts reach the engine only through ``TrainingEngine``: with another engine installed, ``FitTask``,
``Models`` and ``Architecture`` call it, and nothing else."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from arena.contracts.architecture import Architecture, Template
from arena.contracts.defense import FitTask
from arena.contracts.engine import install_engine, training_engine
from arena.contracts.recipe import DPNoise, Recipe
from arena.contracts.release import Models
from arena.engine.torch_engine import ENGINE, TorchEngine
from tests.conftest import architecture


class Recording(TorchEngine):
    """The arena's engine, recording each call the contracts make of it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def train(self, *args: object, **kwargs: object) -> dict[str, torch.Tensor]:
        self.calls.append("train")
        return super().train(*args, **kwargs)

    def template(self, arch: Architecture) -> Template:
        self.calls.append("template")
        return super().template(arch)

    def logits(self, *args: object) -> torch.Tensor:
        self.calls.append("logits")
        return super().logits(*args)

    def ensemble(self, *args: object) -> object:
        self.calls.append("ensemble")
        return super().ensemble(*args)

    def minibatches(self, *args: object, **kwargs: object) -> Iterator:
        self.calls.append("minibatches")
        return super().minibatches(*args, **kwargs)


@pytest.fixture
def recording() -> Iterator[Recording]:
    engine = Recording()
    install_engine(lambda: engine)
    try:
        yield engine
    finally:
        install_engine(lambda: ENGINE)


def _task(arch: Architecture) -> FitTask:
    g = torch.Generator().manual_seed(0)
    X = torch.rand(2, 12, 4, generator=g)
    y = torch.randint(0, 3, (2, 12), generator=g)
    return FitTask(arch, Recipe(epochs=2, lr=0.1, batch_size=4), X, y, torch.tensor([1, 2]), torch.tensor([3, 4]))


def test_the_root_installs_the_arena_engine() -> None:
    assert training_engine() is ENGINE


def test_the_contracts_train_and_query_through_the_installed_engine(recording: Recording) -> None:
    arch = architecture("mlp", 4, 3, hidden=[5])
    task = _task(arch)
    state = task.train()
    assert recording.calls[0] == "train" and set(state) == set(arch.template().trainable)
    task.train(DPNoise(clip=1.0, noise_multiplier=0.5))
    ensemble = task.ensemble()
    batches = list(task.minibatches())
    assert len(batches) == 2 * 3 and batches[0][0].shape == (2, 4, 4)
    models = Models(arch, state)
    assert models.logits(task.X[0]).shape == (2, 12, 3)
    assert {"train", "template", "ensemble", "minibatches", "logits"} <= set(recording.calls)
    assert recording.calls.count("train") == 2 and isinstance(ensemble, torch.nn.Module)


def test_training_through_the_protocol_is_the_engine_s_training() -> None:
    arch = architecture("mlp", 4, 3, hidden=[5])
    task = _task(arch)
    from arena.engine.trainer import train

    direct = train(arch, task.X, task.y, task.recipe, task.init_seeds, task.train_seeds)
    through = task.train()
    assert all(torch.equal(direct[k], through[k]) for k in direct)
