"""The description of a dense softmax classifier (logistic regression or MLP), which a model plugin may give so
that the engine trains it on its hand-written fast path (``Model.dense``); the path itself is the engine's."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal

import torch

Layers = list[torch.Tensor]
"""Stacked dense layers [W1, b1, W2, b2, ...], each with a leading model axis."""

ACTIVATIONS = ("relu", "tanh", "sigmoid")
"""The hidden activations the fast path implements."""


@dataclass(frozen=True)
class Dense:
    """Softmax classifier; `logreg` is an MLP with no hidden layer. `l2` penalises weights only."""

    kind: Literal["logreg", "mlp"]
    in_dim: int
    n_classes: int
    hidden: tuple[int, ...] = ()
    activation: Literal["relu", "tanh", "sigmoid"] = "relu"
    l2: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden", tuple(self.hidden))
        if self.kind not in ("logreg", "mlp"):
            raise ValueError(f"unknown kind {self.kind!r}")
        if (self.kind == "logreg") != (self.hidden == ()):
            raise ValueError("logreg has no hidden layers and an mlp has at least one")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {self.activation!r}")
        if self.in_dim < 1 or self.n_classes < 2 or any(h < 1 for h in self.hidden):
            raise ValueError("need in_dim >= 1, n_classes >= 2 and positive hidden widths")
        if self.l2 < 0:
            raise ValueError("l2 must be non-negative")

    def layer_shapes(self) -> list[tuple[int, int]]:
        """(in, out) of each linear layer, input to output."""
        dims = (self.in_dim, *self.hidden, self.n_classes)
        return list(itertools.pairwise(dims))

    @property
    def n_params(self) -> int:
        """Number of scalars in one model (weights and biases)."""
        return sum(i * o + o for i, o in self.layer_shapes())


def to_layers(state: dict[str, torch.Tensor]) -> Layers:
    """Stacked ``nn.Linear`` parameters (weight [K,out,in], bias [K,out], in module order) as dense layers."""
    return [t.transpose(1, 2) if t.ndim == 3 else t for t in state.values()]


def to_state(names: list[str], layers: Layers) -> dict[str, torch.Tensor]:
    """Inverse of ``to_layers``: dense layers back under the module's parameter names."""
    return {n: (t.transpose(1, 2) if t.ndim == 3 else t).contiguous() for n, t in zip(names, layers)}
