"""The training engine as the contracts see it: one narrow protocol, ``TrainingEngine``, which the engine
(``arena.engine``, a layer above the contracts) implements. The contracts never import the engine; they reach it
through ``training_engine()``, which the package's root (``arena/__init__.py``) points at the engine, lazily,
before any contract module can run: so the contracts, and a plugin written against them, do not move when the
engine does, and another engine (a test double, an accelerator's) can stand behind the same protocol.

The protocol's core is ``train``: K models of an architecture trained under a recipe, with DP-SGD or without,
their states returned. The other methods are what the contracts' own helpers need of the engine: the module as a
stateless function (``template``), BatchNorm replaced for per-example clipping (``group_norm``), the batched
forward pass (``logits``), the K seeded models as one ``nn.Module`` (``ensemble``) and the recipe's batches
(``minibatches``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

    from arena.contracts.architecture import Architecture, Batch, ModelStack, State, Template
    from arena.contracts.recipe import DPNoise, Recipe


class TrainingEngine(Protocol):
    """What trains and runs K models of one architecture at once (model k from its own seeds alone)."""

    def train(self, arch: Architecture, X: torch.Tensor, y: torch.Tensor, recipe: Recipe, init_seeds: torch.Tensor,
              train_seeds: torch.Tensor, dp: DPNoise | None = None) -> State:
        """Train K models of ``arch``, model k on (X[k], y[k]) (X [K, n, d], y [K, n]) under ``recipe``, from
        ``init_seeds[k]`` and ``train_seeds[k]``; with ``dp``, by DP-SGD (Poisson sampling, per-example clipping,
        Gaussian noise). Their parameters and buffers, stacked over the K models."""
        ...

    def template(self, arch: Architecture) -> Template:
        """``arch``'s module as a stateless function, with the names of its trainable and penalised tensors."""
        ...

    def group_norm(self, module: torch.nn.Module) -> torch.nn.Module:
        """``module`` with its BatchNorm layers replaced by GroupNorm (``ValueError`` naming one that cannot be)."""
        ...

    def logits(self, arch: Architecture, state: State, X: torch.Tensor) -> torch.Tensor:
        """Logits [K, n, C] of the K models ``state`` in eval mode on flat records X [n, d] or [K, n, d]."""
        ...

    def ensemble(self, arch: Architecture, init_seeds: torch.Tensor, train_seeds: torch.Tensor, dtype: torch.dtype,
                 device: torch.device) -> ModelStack:
        """The K models initialised from ``init_seeds`` exactly as ``train`` initialises them, as one module."""
        ...

    def minibatches(self, arch: Architecture, recipe: Recipe, X: torch.Tensor, y: torch.Tensor,
                    train_seeds: torch.Tensor, poisson: bool = False) -> Iterator[Batch]:
        """The recipe's batches of ``train``: per-model shuffles (or Poisson samples), augmented as it asks."""
        ...


_provider: list[Callable[[], TrainingEngine]] = []
_engine: list[TrainingEngine] = []


def install_engine(provider: Callable[[], TrainingEngine]) -> None:
    """Point ``training_engine()`` at ``provider``, called once on first use (so that installing imports nothing).
    The package's root installs the arena's engine; a test may install another and restore the first."""
    _provider[:] = [provider]
    _engine.clear()


def training_engine() -> TrainingEngine:
    """The training engine of this process (``RuntimeError`` if none is installed; importing ``arena`` installs
    the arena's)."""
    if not _engine:
        if not _provider:
            raise RuntimeError("no training engine is installed (importing arena installs the arena's)")
        _engine.append(_provider[0]())
    return _engine[0]
