"""What every game provides to the tournament: checks, the release, and the scoring of one attack."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from pydantic import BaseModel

from arena.attack import Attack, Capability
from arena.data import Dataset
from arena.procedure import TrainingProcedure
from arena.release import Release


@dataclass
class Outcome:
    """The scored result of one matchup: metrics, notes on what the sample cannot resolve, arrays to keep."""

    metrics: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


class Game:
    """Base class of games. The game holds the secret (membership labels, targets); attacks only get a view."""

    name: ClassVar[str]
    capabilities: ClassVar[frozenset[Capability]]

    def __init__(self, spec: BaseModel, dataset: Dataset, seed: int) -> None:
        self.spec = spec
        self.dataset = dataset
        self.seed = seed

    def records(self, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Features and labels of the dataset rows ``idx`` as tensors."""
        return torch.from_numpy(self.dataset.X[idx]), torch.from_numpy(self.dataset.y[idx]).long()

    @classmethod
    def problems(cls, spec: BaseModel, dataset: Dataset) -> list[tuple[str, str]]:
        """(field, message) for every way ``spec`` cannot be played on ``dataset``."""
        need = spec.required_points()
        if need > dataset.n:
            return [("", f"needs {need} points but dataset {dataset.name!r} has {dataset.n}")]
        return []

    @classmethod
    def train_size(cls, spec: BaseModel) -> int:
        """Size of each released model's training set (DP defenses check δ < 1/n against it)."""
        raise NotImplementedError

    def release(self, procedure: TrainingProcedure) -> Release:
        """Train the released model(s) through ``procedure`` and measure their utility."""
        raise NotImplementedError

    def play(self, attack: Attack, release: Release, procedure: TrainingProcedure) -> Outcome:
        """Build the attack's view, run it, score its guess against the secret."""
        raise NotImplementedError

    def save_artifacts(self, outcome: Outcome, directory: Path) -> None:
        """Write files that illustrate ``outcome`` (e.g. pictures) into ``directory``; default: none."""
