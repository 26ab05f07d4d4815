"""The training procedure as a callable: a defense configuration bound to a track's model and recipe, cached.

Released models and every attacker's shadow models go through ``TrainingProcedure``, so they share one code
path and one content-addressed cache: identical requests train once per run directory.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch

from arena.defense import Claim, Defense, FitTask
from arena.engine.trainer import Recipe
from arena.models import Architecture
from arena.release import Models
from arena.store import TensorCache, content_key, tensor_digest

Solver = Literal["auto", "gradient", "newton"]


@dataclass
class TrainingStats:
    """How many models this procedure trained and how many it found in the cache (tests and timings read it)."""

    trained: int = 0
    cached: int = 0
    calls: int = 0


@dataclass
class TrainingProcedure:
    """``defense`` with ``arch`` and ``recipe`` bound; call it with data and seeds to get trained models."""

    defense: Defense
    arch: Architecture
    recipe: Recipe
    solver: Solver = "auto"
    device: str = "cpu"
    cache: TensorCache | None = None
    stats: TrainingStats = field(default_factory=TrainingStats)

    def identity(self) -> dict:
        """Everything that determines the trained models apart from data and seeds."""
        return {
            "defense": self.defense.name,
            "defense_version": self.defense.version,
            "params": self.defense.params.model_dump(mode="json"),
            "arch": self.arch.__dict__,
            "recipe": self.recipe.__dict__,
            "solver": self.solver,
        }

    def __call__(
        self,
        X: torch.Tensor,
        y: torch.Tensor,
        init_seeds: Sequence[int] | torch.Tensor,
        train_seeds: Sequence[int] | torch.Tensor,
    ) -> tuple[Models, Claim | None]:
        """Train K models, model k on (X[k], y[k]); X is [K, n, d], y [K, n]."""
        init = torch.as_tensor(init_seeds, dtype=torch.int64)
        train = torch.as_tensor(train_seeds, dtype=torch.int64)
        if X.ndim != 3 or y.shape != X.shape[:2] or len(init) != X.shape[0] or len(train) != X.shape[0]:
            raise ValueError("training procedure needs X [K, n, d], y [K, n] and K init and train seeds")
        self.stats.calls += 1
        key = content_key({**self.identity(), "data": tensor_digest(X, y, init, train)})
        if self.cache is None:
            models, claim, _ = self._fit(X, y, init, train)
            return models, claim
        with self.cache.lock("models", key):
            if (hit := self.cache.get("models", key)) is not None:
                self.stats.cached += X.shape[0]
                return self._models(hit), self._claim(hit)
            models, claim, tensors = self._fit(X, y, init, train)
            self.cache.put("models", key, tensors)
            return models, claim

    def _fit(
        self, X: torch.Tensor, y: torch.Tensor, init: torch.Tensor, train: torch.Tensor
    ) -> tuple[Models, Claim | None, dict[str, torch.Tensor]]:
        """Train through the defense; also return the tensors the cache stores."""
        task = FitTask(
            arch=self.arch,
            recipe=self.recipe,
            X=X.to(self.device, torch.float32),
            y=y.to(self.device, torch.int64),
            init_seeds=init.to(self.device),
            train_seeds=train.to(self.device),
            solver=self.solver,
        )
        fit = self.defense.fit(task)
        self.stats.trained += X.shape[0]
        tensors = {f"p{i}": p.detach().cpu() for i, p in enumerate(fit.params)}
        if fit.claim is not None:
            tensors["claim"] = torch.frombuffer(bytearray(json.dumps(fit.claim.as_dict()).encode()), dtype=torch.uint8)
        return self._models(tensors), fit.claim, tensors

    def _models(self, tensors: dict[str, torch.Tensor]) -> Models:
        n = sum(1 for k in tensors if k.startswith("p"))
        return Models(self.arch, [tensors[f"p{i}"] for i in range(n)])

    @staticmethod
    def _claim(tensors: dict[str, torch.Tensor]) -> Claim | None:
        if "claim" not in tensors:
            return None
        return Claim(**json.loads(bytes(tensors["claim"].tolist()).decode()))
