"""Trained models as the arena hands them around: batched parameters, and the black-box query interface."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from arena.defense import Claim
from arena.models import Architecture, Params, forward


@dataclass(frozen=True)
class Models:
    """K trained models of one architecture (parameters carry a leading model axis)."""

    arch: Architecture
    params: Params

    @property
    def k(self) -> int:
        return self.params[0].shape[0]

    def logits(self, X: torch.Tensor) -> torch.Tensor:
        """Logits [K, n, C] for X [n, d] (shared) or [K, n, d] (one set per model)."""
        with torch.no_grad():
            return forward(self.arch, self.params, X.to(self.params[0].dtype))

    def predict_proba(self, X: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.logits(X), dim=-1)

    def loss(self, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-example cross-entropy [K, n]."""
        logp = torch.log_softmax(self.logits(X), dim=-1)
        yy = y.expand(logp.shape[:2]) if y.ndim == 1 else y
        return -logp.gather(-1, yy.unsqueeze(-1)).squeeze(-1)

    def accuracy(self, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Accuracy [K] of each model on (X, y)."""
        return (self.logits(X).argmax(-1) == y).to(torch.float64).mean(-1)

    def select(self, index: int) -> Models:
        return Models(self.arch, [p[index : index + 1] for p in self.params])


@dataclass(frozen=True)
class Release:
    """The released model of one (track, defense configuration, seed): parameters, utility and claim."""

    models: Models
    utility: float
    claim: Claim | None


class BlackBox:
    """Query access to one released model: output probabilities and losses on points the attacker chooses."""

    def __init__(self, models: Models) -> None:
        if models.k != 1:
            raise ValueError("a black box wraps exactly one model")
        self._models = models

    def predict_proba(self, X: torch.Tensor) -> torch.Tensor:
        """Probabilities [n, C]."""
        return self._models.predict_proba(X)[0]

    def log_proba(self, X: torch.Tensor) -> torch.Tensor:
        """Log-probabilities [n, C]: the same answers as ``predict_proba``, without rounding 1 - p to zero."""
        return torch.log_softmax(self._models.logits(X), dim=-1)[0]

    def loss(self, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Cross-entropy [n] of each (x, y)."""
        return self._models.loss(X, y)[0]
