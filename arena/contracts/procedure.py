"""The training procedure as a game and an attack see it: the target's defense bound to its model and recipe, a
callable that trains K models. The pipeline's ``TrainingProcedure`` is the one implementation (it adds the run's
cache and Ray scheduling); this protocol is what the contracts may rely on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

from arena.contracts.architecture import Architecture
from arena.contracts.defense import Claim, Defense
from arena.contracts.recipe import Recipe
from arena.contracts.release import Models

Chunk = tuple[torch.Tensor, ...]
"""One independently trained part of a pool: X [K, n, d], y [K, n], init seeds [K], train seeds [K], optionally
followed by each model's reference set (``reference_X`` [K, r, d], ``reference_y`` [K, r]; see ``Procedure``)."""


class Procedure(Protocol):
    """Train K models, model k on (X[k], y[k]) from its own seeds, exactly as the target was trained."""

    defense: Defense
    arch: Architecture
    recipe: Recipe
    device: str
    chunk: int

    def __call__(self, X: torch.Tensor, y: torch.Tensor, init_seeds: Sequence[int] | torch.Tensor,
                 train_seeds: Sequence[int] | torch.Tensor, reference_X: torch.Tensor | None = None,
                 reference_y: torch.Tensor | None = None) -> tuple[Models, Claim | None]:
        """``reference_X`` [r, d] (shared) or [K, r, d], ``reference_y`` likewise: the reference set a defense that
        ``needs_reference`` is given, records outside every model's training set; None: the one the procedure was
        bound to (the game binds the attacker's population)."""
        ...

    def train_chunks(self, chunks: Sequence[Chunk]) -> list[Models]: ...
