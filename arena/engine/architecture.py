"""A model configuration bound to a dataset's input shape and class count: what the engine trains K copies of."""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from pydantic import BaseModel
from torch.func import replace_all_batch_norm_modules_

from arena.engine import ghost_plan
from arena.engine.dense import Dense
from arena.engine.groupnorm import batch_norms, replace_batch_norm


class ModelPlugin(Protocol):
    """What the engine needs of a model plugin (``arena.contracts.model.Model``, which sits above the engine and
    satisfies this): its identity, its validated parameters, and the module it builds."""

    @property
    def name(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def params(self) -> BaseModel: ...
    def build(self, input_shape: tuple[int, ...], n_classes: int) -> torch.nn.Module: ...
    def dense(self, input_shape: tuple[int, ...], n_classes: int) -> Dense | None: ...

State = dict[str, torch.Tensor]
"""K models' parameters and buffers by module name, each tensor with a leading model axis [K, ...]."""


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
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Architecture) and self.identity() == other.identity()

    def __hash__(self) -> int:
        return hash(json.dumps(self.identity(), sort_keys=True))

    def __getstate__(self) -> dict[str, Any]:
        return {"model": self.model, "input_shape": self.input_shape, "n_classes": self.n_classes,
                "group_norm": self.group_norm}

    def __setstate__(self, state: dict[str, Any]) -> None:
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
        """A fresh module from the plugin, batch-norm layers replaced by GroupNorm (``group_norm``) or set to use
        batch statistics only (so that K copies can run under ``vmap``); initialised from torch's global
        generator."""
        module = self.model.build(self.input_shape, self.n_classes)
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"model {self.model.name!r} built {type(module).__name__}, not a torch.nn.Module")
        if self.group_norm:
            module = replace_batch_norm(module)
        return replace_all_batch_norm_modules_(module)

    def template(self) -> Template:
        """The module used as a stateless function (``functional_call``), built once per process."""
        return _template(self)


@dataclass(frozen=True)
class Template:
    """One module used as a pure function of its tensors, and the names of its trainable / penalised tensors."""

    module: torch.nn.Module
    trainable: tuple[str, ...]
    buffers: tuple[str, ...]
    penalised: frozenset[str]
    ghost: ghost_plan.Plan | None = None
    """How DP-SGD clips this module without per-example backward passes (a stack of linear, convolution and
    GroupNorm layers, see ``arena.engine.ghost`` and ``ghost_plan``), or None: per-example gradients through
    ``vmap(grad)``."""

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.module.parameters())


@functools.lru_cache(maxsize=32)
def _template(arch: Architecture) -> Template:
    module = arch.build().eval()
    names = tuple(n for n, _ in module.named_parameters())
    buffers = tuple(n for n, _ in module.named_buffers())
    penalised = frozenset(n for n, p in module.named_parameters() if p.ndim >= 2)
    return Template(module, names, buffers, penalised, ghost_plan.plan(module, arch.input_shape))


def _meta_build(arch: Architecture) -> torch.nn.Module:
    """``arch.build()`` on the meta device (nothing allocated), or for real for a model whose construction needs
    real tensors (the plan has checked that its size fits before asking)."""
    try:
        with torch.device("meta"):
            return arch.build()
    except (NotImplementedError, RuntimeError):
        return arch.build()


def batch_norm_layers(arch: Architecture) -> list[str]:
    """The names of the module's BatchNorm layers, which normalise over the batch: that mixes examples and defeats
    per-example clipping."""
    return batch_norms(_meta_build(arch))


def for_per_example_clipping(arch: Architecture) -> Architecture:
    """``arch`` as a defense that clips per-example gradients trains it: with its BatchNorm layers replaced by
    GroupNorm when it has any (``ValueError`` naming those that cannot be), else unchanged."""
    if arch.group_norm or not batch_norm_layers(arch):
        return arch
    fixed = Architecture(arch.model, arch.input_shape, arch.n_classes, group_norm=True)
    _meta_build(fixed)  # raises for a BatchNorm subclass that cannot be replaced
    return fixed


def group_norm_problem(arch: Architecture) -> str | None:
    """Why ``arch`` cannot train under per-example clipping (a BatchNorm layer that GroupNorm cannot replace, or
    a module that fails to build once replaced), or None."""
    try:
        for_per_example_clipping(arch).template()
    except ValueError as exc:
        return str(exc)
    return None


GROUP_NORM_NOTE = ("model: BatchNorm layers replaced by GroupNorm (gcd(32, channels) groups, as Opacus's "
                   "ModuleValidator.fix does) so that per-example gradients can be clipped")
"""The row note of a matchup whose model trained with ``group_norm``."""
