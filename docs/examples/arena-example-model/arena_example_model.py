"""A model plugin: a small residual MLP for flat (tabular) or image records.

Scenario files name it ``model: {name: example-resmlp, width: 64, blocks: 2}``. ``build`` returns an ordinary
``torch.nn.Module``; the engine stacks K seeded copies of it and trains them at once (``torch.func``), so the
module must not mix examples within a batch (no BatchNorm) if DP-SGD is to train it: LayerNorm is per example.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import Field
from torch import nn

from arena import Model, ModelParams, hookimpl

_ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh}


class ResMLPParams(ModelParams):
    """``ModelParams`` brings ``l2`` (the weight penalty every defense applies); the rest is this model's own."""

    width: int = Field(default=64, ge=1, le=4096, description="width of every hidden layer")
    blocks: int = Field(default=1, ge=0, le=16, description="residual blocks after the input layer")
    activation: Literal["relu", "gelu", "tanh"] = "gelu"
    layernorm: bool = Field(default=False, description="LayerNorm before each block (per example: DP-SGD safe)")


class _Block(nn.Module):
    def __init__(self, width: int, act: type[nn.Module], layernorm: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width) if layernorm else nn.Identity()
        self.linear = nn.Linear(width, width)
        self.act = act()

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.act(self.linear(self.norm(h)))


class ResMLP(Model):
    """Flatten, a linear layer and activation, ``blocks`` residual blocks, a linear read-out."""

    name = "example-resmlp"
    version = "1"
    Params = ResMLPParams
    params: ResMLPParams

    def build(self, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
        # Initialised from torch's global generator: the engine seeds it once per model before calling build.
        p = self.params
        act = _ACTIVATIONS[p.activation]
        return nn.Sequential(
            nn.Flatten(),
            nn.Linear(math.prod(input_shape), p.width),
            act(),
            *(_Block(p.width, act, p.layernorm) for _ in range(p.blocks)),
            nn.Linear(p.width, n_classes),
        )


@hookimpl
def register_models(register) -> None:  # noqa: ANN001 - the registry's callback
    register(ResMLP)
