"""The training procedure as a game and an attack see it: the target's defense bound to its model and recipe, a
callable that trains K models. The pipeline's ``TrainingProcedure`` is the one implementation (it adds the run's
cache and Ray scheduling); this protocol is what the contracts may rely on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

from arena.contracts.defense import Claim, Defense
from arena.contracts.release import Models
from arena.engine.architecture import Architecture
from arena.engine.recipe import Recipe

Chunk = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
"""One independently trained part of a pool: X [K, n, d], y [K, n], init seeds [K], train seeds [K]."""


class Procedure(Protocol):
    """Train K models, model k on (X[k], y[k]) from its own seeds, exactly as the target was trained."""

    defense: Defense
    arch: Architecture
    recipe: Recipe
    device: str
    chunk: int

    def __call__(self, X: torch.Tensor, y: torch.Tensor, init_seeds: Sequence[int] | torch.Tensor,
                 train_seeds: Sequence[int] | torch.Tensor) -> tuple[Models, Claim | None]: ...

    def train_chunks(self, chunks: Sequence[Chunk]) -> list[Models]: ...
