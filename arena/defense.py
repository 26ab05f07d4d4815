"""The defense contract: a training procedure that turns data into K models and its privacy claim."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from pydantic import BaseModel

from arena.data import NoParams
from arena.engine.trainer import Recipe
from arena.models import Architecture, Params


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
        return {k: v for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class FitTask:
    """Everything a defense needs to train K models of one architecture at once.

    ``X`` is [K, n, d] and ``y`` [K, n]: model k trains on (X[k], y[k]).
    ``init_seeds`` fix each model's initialisation, ``train_seeds`` its sampling and noise.
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


@dataclass(frozen=True)
class Fit:
    """The trained parameters of K models, and the privacy claim that covers each of them (or None)."""

    params: Params
    claim: Claim | None


class Defense:
    """Base class of defense plugins; one instance holds one validated configuration."""

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    Params: ClassVar[type[BaseModel]] = NoParams

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
