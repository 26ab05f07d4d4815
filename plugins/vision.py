"""Models people already have: any torchvision classification architecture, or any timm model, by name, built
without weights (nothing is downloaded). torchvision and timm are optional (``pip install 'privacy-arena[vision]'``)
and imported only when a scenario names one of these models; without them the scenario is refused, naming the
field.

A model is built for the dataset's record shape and class count, and run once on two blank records when first
built, so that an architecture too deep for small images (Inception needs 75×75) is refused before any work
rather than failing mid-tournament. BatchNorm, which both libraries use widely, becomes GroupNorm under DP-SGD
(the arena does it, with a note in the row).
"""

from __future__ import annotations

import difflib
import importlib
import json
from types import ModuleType
from typing import Literal

import torch
from pydantic import ConfigDict, Field, field_validator
from torch import nn

from arena import Model, ModelParams, hookimpl

Option = bool | int | float | str
"""A builder keyword a scenario may set (``options: {image_size: 32}``): YAML scalars only."""

RESERVED = frozenset({"weights", "pretrained", "num_classes", "in_chans", "pretrained_cfg", "pretrained_cfg_overlay",
                      "checkpoint_path", "weights_backbone", "progress"})
"""Builder keywords the arena sets itself (classes, channels) or forbids (weights: every model starts untrained)."""

EXTRA = "pip install 'privacy-arena[vision]'"


def library(name: str) -> ModuleType:
    """``name`` imported, or a ``ValueError`` saying it is missing (and how to install it) or does not import."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if exc.name == name:
            raise ValueError(f"{name} is not installed; install it for this torch ({EXTRA})") from None
        raise ValueError(f"{name} does not import beside this torch ({type(exc).__name__}: {exc})") from None
    except Exception as exc:  # noqa: BLE001 - e.g. a wheel built for another torch failing to register its ops
        raise ValueError(f"{name} does not import beside this torch ({type(exc).__name__}: {exc})") from None


def unknown(library_name: str, name: str, known: list[str]) -> ValueError:
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
    return ValueError(f"{library_name} has no classification model {name!r} ({len(known)} known){hint}")


class _VisionParams(ModelParams):
    model_config = ConfigDict(strict=True)

    architecture: str = Field(min_length=1, max_length=200, description="the library's model name, e.g. resnet18")
    options: dict[str, Option] = Field(default_factory=dict, max_length=32,
                                       description="further keyword arguments of the library's builder")

    @field_validator("options")
    @classmethod
    def _not_reserved(cls, options: dict[str, Option]) -> dict[str, Option]:
        taken = sorted(RESERVED & set(options))
        if taken:
            raise ValueError(f"{', '.join(taken)}: set by the arena (classes, channels) or forbidden (weights: "
                             "every model starts untrained)")
        return options


class TorchvisionParams(_VisionParams):
    @field_validator("architecture")
    @classmethod
    def _known(cls, name: str) -> str:
        models = library("torchvision").models
        known = sorted(models.list_models(module=models))
        if name not in known:
            raise unknown("torchvision", name, known)
        return name


class TimmParams(_VisionParams):
    pretrained: Literal[False] = Field(default=False, description="always false: no weights are downloaded")

    @field_validator("architecture")
    @classmethod
    def _known(cls, name: str) -> str:
        timm = library("timm")
        if not timm.is_model(name):
            raise unknown("timm", name, sorted(timm.list_models()))
        return name


class RepeatChannels(nn.Module):
    """Grey-scale records [B, 1, H, W] repeated to the three channels an RGB architecture takes."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.expand(-1, 3, -1, -1))


_PROBED: set[str] = set()
"""The (model, parameters, shape, classes) already run once in this process."""


def probed(model: Model, module: nn.Module, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """``module`` once it has mapped two blank records to [2, n_classes] logits (checked on its first build in
    this process; a ``ValueError`` naming the shape otherwise)."""
    key = json.dumps([model.name, model.params.model_dump(mode="json"), list(input_shape), n_classes])
    if key in _PROBED:
        return module
    device = next(iter(module.parameters()), torch.empty(0)).device
    training = module.training
    try:
        with torch.no_grad():
            out = module.eval()(torch.zeros(2, *input_shape, device=device))
    except (RuntimeError, ValueError, TypeError, IndexError, AssertionError) as exc:
        raise ValueError(f"{model.name} model {model.params.architecture!r} does not run on records of shape "  # type: ignore[attr-defined]  # both Params have it
                         f"{tuple(input_shape)} ({type(exc).__name__}: {exc}); smaller images may need "
                         "options such as image_size, or a shallower architecture") from None
    finally:
        module.train(training)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (2, n_classes):
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"{model.name} model {model.params.architecture!r} returns {got}, not logits "  # type: ignore[attr-defined]  # both Params have it
                         f"[batch, {n_classes}]")
    _PROBED.add(key)
    return module


def _channels(input_shape: tuple[int, ...], model: str) -> int:
    if len(input_shape) != 3:
        raise ValueError(f"model {model!r} needs image records of shape (channels, height, width), "
                         f"not {tuple(input_shape)}")
    return input_shape[0]


class Torchvision(Model):
    """A torchvision classification architecture by name (``torchvision.models.get_model``), ``weights=None``,
    its head sized to the dataset's classes; grey-scale records are repeated to three channels."""

    name = "torchvision"
    Params = TorchvisionParams
    params: TorchvisionParams

    def build(self, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
        c = _channels(input_shape, self.name)
        if c not in (1, 3):
            raise ValueError(f"model 'torchvision' takes RGB images (grey-scale ones are repeated to 3 channels), "
                             f"not {c} channels")
        models = library("torchvision").models
        net = models.get_model(self.params.architecture, weights=None, num_classes=n_classes, **self.params.options)
        return probed(self, RepeatChannels(net) if c == 1 else net, input_shape, n_classes)


class Timm(Model):
    """A timm model by name (``timm.create_model``), ``pretrained=False``, built for the dataset's channels
    (``in_chans``) and classes."""

    name = "timm"
    Params = TimmParams
    params: TimmParams

    def build(self, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
        c = _channels(input_shape, self.name)
        net = library("timm").create_model(self.params.architecture, pretrained=False, num_classes=n_classes,
                                           in_chans=c, **self.params.options)
        return probed(self, net, input_shape, n_classes)


@hookimpl
def register_models(register) -> None:  # noqa: ANN001
    for model in (Torchvision, Timm):
        register(model)
