"""The defense contract: a training procedure that turns data into K models and its privacy claim."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from pydantic import BaseModel

from arena.contracts.params import NoParams
from arena.engine import rng
from arena.engine.architecture import Architecture, State
from arena.engine.batching import Batch, augmented, batches, poisson_batches
from arena.engine.ensemble import Ensemble, init_state
from arena.engine.recipe import Recipe


@dataclass(frozen=True)
class Claim:
    """What a DP defense promises, as accounted: the ε achieved (never above the target) and how."""

    epsilon: float
    delta: float
    accountant: str
    target_epsilon: float | None = None
    noise_multiplier: float | None = None
    sample_rate: float | None = None
    steps: int | None = None
    mechanism: str = ""

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class FitTask:
    """Everything a defense needs to train K models of one architecture at once.

    ``X`` is [K, n, d] (flat records) and ``y`` [K, n]: model k trains on (X[k], y[k]). ``init_seeds`` fix each
    model's initialisation, ``train_seeds`` its sampling, augmentation and noise. A defense may hand the task to
    the engine (``arena.engine.trainer.train``) or train in plain PyTorch: ``ensemble()`` is an ``nn.Module``
    holding the K seeded models, ``minibatches()`` the recipe's batches, and ``Fit.of(ensemble)`` the result.
    """

    arch: Architecture
    recipe: Recipe
    X: torch.Tensor
    y: torch.Tensor
    init_seeds: torch.Tensor
    train_seeds: torch.Tensor
    solver: Literal["auto", "gradient", "newton"] = "auto"

    @property
    def k(self) -> int:
        return self.X.shape[0]

    @property
    def n(self) -> int:
        return self.X.shape[1]

    def ensemble(self) -> Ensemble:
        """The K models, initialised from ``init_seeds`` exactly as the engine initialises them."""
        return Ensemble(self.arch, init_state(self.arch, self.init_seeds, self.X.dtype, self.X.device))

    def minibatches(self, poisson: bool = False) -> Iterator[Batch]:
        """(X [K, B, *input_shape], y [K, B], valid [K, B] or None) per step: a fresh per-model shuffle each epoch
        cut into batches (or, with ``poisson``, DP-SGD's Poisson samples), augmented as the recipe asks."""
        seeds = rng.Keys(self.train_seeds)
        source = (poisson_batches if poisson else batches)(self.X, self.y, self.recipe, seeds)
        for Xb, yb, valid in augmented(source, self.arch, self.recipe.augment, seeds):
            yield Xb.reshape(*Xb.shape[:2], *self.arch.input_shape), yb, valid


@dataclass(frozen=True)
class Fit:
    """The trained parameters of K models (stacked, by module name), and the privacy claim covering each (or None)."""

    state: State
    claim: Claim | None

    @classmethod
    def of(cls, ensemble: Ensemble, claim: Claim | None = None) -> Fit:
        """The result of a defense that trained ``ensemble`` itself."""
        return cls(ensemble.detached(), claim)


class Defense:
    """Base class of defense plugins; one instance holds one validated configuration."""

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    Params: ClassVar[type[BaseModel]] = NoParams
    per_example_gradients: ClassVar[bool] = False
    """True for defenses that clip per-example gradients (DP-SGD): models that mix examples are refused."""

    def __init__(self, params: BaseModel) -> None:
        self.params = params

    @classmethod
    def expand(cls, params: BaseModel) -> list[BaseModel]:
        """The configurations one scenario entry stands for (e.g. one per ε); default: itself."""
        return [params]

    def target_epsilon(self) -> float | None:
        """The ε this configuration aims for, or None for a defense that claims nothing."""
        return None

    def target_delta(self) -> float | None:
        return None

    def validate_for(self, n_train: int) -> list[tuple[str, str]]:
        """Problems with this configuration for a training set of ``n_train`` records, as (field, message)."""
        return []

    def fit(self, task: FitTask) -> Fit:
        """Train the K models of ``task``."""
        raise NotImplementedError
