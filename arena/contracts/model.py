"""The model contract: a plugin that builds a ``torch.nn.Module`` from its parameters and the dataset's shape."""

from __future__ import annotations

import abc
from typing import ClassVar

import torch
from pydantic import Field

from arena.contracts.dense import Dense
from arena.contracts.params import PluginParams


class ModelParams(PluginParams):
    """Parameters every model takes; a model plugin's ``Params`` subclasses it."""

    l2: float = Field(default=0.0, ge=0.0, le=1e6, allow_inf_nan=False,
                      description="L2 penalty (l2/2)·||w||² on every weight tensor (not on biases or norm scales), "
                                  "in [0, 1e6]: beyond that it only drives every weight to zero (1e300 overflows "
                                  "the training loss)")


class Model(abc.ABC):
    """Base class of model plugins; one instance holds one validated configuration.

    ``build`` must return a fresh module initialised from torch's global generator: the engine seeds it once per
    model, so model k's initialisation depends on its own seed alone. ``input_shape`` is one record's shape
    (channels first for images, e.g. (1, 8, 8)); inputs arrive as [batch, *input_shape].
    """

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    Params: ClassVar[type[ModelParams]] = ModelParams

    def __init__(self, params: ModelParams) -> None:
        self.params = params

    @abc.abstractmethod
    def build(self, input_shape: tuple[int, ...], n_classes: int) -> torch.nn.Module:
        """A new module mapping [batch, *input_shape] to logits [batch, n_classes]."""

    def dense(self, input_shape: tuple[int, ...], n_classes: int) -> Dense | None:
        """The hand-written fast path's description of this model, when it is a plain stack of linear layers whose
        parameters (in module order) are exactly [weight, bias] per layer; None for every other model."""
        return None
