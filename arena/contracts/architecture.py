"""A model configuration bound to a dataset's input shape and class count: what the engine trains K copies of,
and what a defense and a white-box attack are handed (``FitTask.arch``, ``Models.arch``).

Plain data: the module it stands for is built by the model plugin, and what the engine makes of it (the module as
a stateless function, ``Template``) comes from the training engine (``arena.contracts.engine``)."""

from __future__ import annotations

import abc
import json
import math
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import torch
from pydantic import BaseModel

from arena.contracts.dense import Dense
from arena.contracts.engine import training_engine


class ModelPlugin(Protocol):
    """What an architecture needs of a model plugin (``arena.contracts.model.Model`` satisfies this): its identity,
    its validated parameters, and the module it builds."""

    @property
    def name(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def params(self) -> BaseModel: ...
    def build(self, input_shape: tuple[int, ...], n_classes: int) -> torch.nn.Module: ...
    def dense(self, input_shape: tuple[int, ...], n_classes: int) -> Dense | None: ...


EngineChoice = Literal["auto", "batched", "loop"]
"""A track's ``engine``: ``auto`` (the batched engine where it is equivalent, else the loop engine), ``batched``
(refused for a module it cannot train as written) or ``loop`` (plain PyTorch one model at a time, Opacus for DP)."""
ENGINE_CHOICES: tuple[EngineChoice, ...] = ("auto", "batched", "loop")

State = dict[str, torch.Tensor]
"""K models' parameters and buffers by module name, each tensor with a leading model axis [K, ...]."""

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]
"""One training step's (X [K, B, ...], y [K, B], valid [K, B] or None: which rows of a Poisson batch are real)."""


@dataclass(frozen=True, eq=False)
class Architecture:
    """``model`` (a model plugin holding its validated parameters) for inputs of ``input_shape`` and
    ``n_classes`` classes. Builds modules, and knows which of their tensors train and which are penalised."""

    model: ModelPlugin
    input_shape: tuple[int, ...]
    n_classes: int
    group_norm: bool = False
    """Replace the module's BatchNorm layers by GroupNorm (``arena.engine.groupnorm``): how a BatchNorm model
    trains under a defense that clips per-example gradients."""
    engine: EngineChoice = "auto"
    """Which engine trains it (the track's ``engine``): keyed apart unless ``auto``, so that caches never mix
    models of the two engines."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "input_shape", tuple(int(s) for s in self.input_shape))

    def identity(self) -> dict[str, Any]:
        """Everything that determines the module: plugin name, version, parameters, input shape, classes."""
        return {
            "model": self.model.name,
            "version": self.model.version,
            "params": self.model.params.model_dump(mode="json"),
            "input_shape": list(self.input_shape),
            "n_classes": self.n_classes,
            **({"group_norm": True} if self.group_norm else {}),
            **({"engine": self.engine} if self.engine != "auto" else {}),
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Architecture) and self.identity() == other.identity()

    def __hash__(self) -> int:
        return hash(json.dumps(self.identity(), sort_keys=True))

    def __getstate__(self) -> dict[str, Any]:
        return {"model": self.model, "input_shape": self.input_shape, "n_classes": self.n_classes,
                "group_norm": self.group_norm, "engine": self.engine}

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "engine", "auto")  # pickled before the field existed
        for k, v in state.items():
            object.__setattr__(self, k, v)

    @property
    def n_features(self) -> int:
        """Length of one flattened record."""
        return math.prod(self.input_shape)

    @property
    def l2(self) -> float:
        return float(getattr(self.model.params, "l2", 0.0))

    @property
    def dense(self) -> Dense | None:
        """The hand path's description when the model is a dense stack (logistic regression, MLP), else None."""
        return self.model.dense(self.input_shape, self.n_classes)

    def build(self) -> torch.nn.Module:
        """A fresh module from the plugin, as its plugin builds it (BatchNorm layers keep their running statistics),
        or with its BatchNorm layers replaced by GroupNorm (``group_norm``, done by the training engine);
        initialised from torch's global generator."""
        module = self.model.build(self.input_shape, self.n_classes)
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"model {self.model.name!r} built {type(module).__name__}, not a torch.nn.Module")
        if self.group_norm:
            module = training_engine().group_norm(module)
        return module

    def template(self) -> Template:
        """The module used as a stateless function (``functional_call``), as the training engine makes it (once per
        process)."""
        return training_engine().template(self)


@dataclass(frozen=True)
class Template:
    """One module used as a pure function of its tensors, and the names of its trainable / penalised tensors.

    ``module`` is in eval mode (queries: dropout off, BatchNorm on its running statistics), ``training`` the same
    module in train mode (training: dropout on, BatchNorm on batch statistics, updating its running statistics in
    the per-model buffers it is called with)."""

    module: torch.nn.Module
    trainable: tuple[str, ...]
    buffers: tuple[str, ...]
    penalised: frozenset[str]
    ghost: Any = None
    """The engine's plan for clipping this module without per-example backward passes (``arena.engine.ghost_plan``;
    opaque to the contracts), or None: per-example gradients through ``vmap(grad)``."""
    training: torch.nn.Module | None = None
    """``module`` in train mode (None: ``module`` itself, for a template made by hand)."""
    random: tuple[str, ...] = ()
    """What draws random numbers in train mode (dropout layers by name, or "forward" when only running the module
    shows it): the batched engine cannot give each model its own draws, so the loop engine trains it."""

    @property
    def train_module(self) -> torch.nn.Module:
        """The module to train through: ``training``, else ``module``."""
        return self.module if self.training is None else self.training

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.module.parameters())


class ModelStack(torch.nn.Module, abc.ABC):
    """K models of one architecture as one ``nn.Module`` whose parameters are the stacked tensors (the engine's
    ``Ensemble``, from ``FitTask.ensemble()``): ``forward`` maps [K, B, d] or [K, B, *input_shape] to logits
    [K, B, C]; summing the K losses and calling ``backward`` gives each model its own gradient."""

    @abc.abstractmethod
    def state(self) -> State:
        """The stacked tensors by module name (live: they are the module's parameters)."""

    @abc.abstractmethod
    def penalised(self) -> list[torch.nn.Parameter]:
        """The weight tensors an L2 penalty covers."""

    @abc.abstractmethod
    def detached(self) -> State:
        """A copy of ``state()`` outside autograd."""
