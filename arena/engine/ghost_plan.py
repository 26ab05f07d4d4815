"""Which modules the layer-by-layer path (``arena.engine.ghost``) takes, decided once per architecture
(``Template.ghost``): an ``nn.Sequential`` (nested ones allowed) whose leaves with parameters are exactly
``nn.Linear``, ``nn.Conv2d`` (groups 1, zero padding, any stride and dilation) or ``nn.GroupNorm`` (affine), and
whose other leaves are torch.nn layers that hold no tensors and act on each example alone. The plan lists the
leaves with their shapes and, per linear or convolution layer, whether its per-example gradients are formed or
ghost-normed (Bu et al. 2022's mixed rule)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

import torch
from torch import nn

from arena.engine.conv_ghost import Offsets, conv_offsets, pair_map

Kind = Literal["linear", "conv", "group_norm", "channelwise", "free"]

_ELEMENTWISE = (
    nn.Threshold, nn.ReLU, nn.RReLU, nn.Hardtanh, nn.ReLU6, nn.Sigmoid, nn.Hardsigmoid, nn.Tanh, nn.SiLU, nn.Mish,
    nn.Hardswish, nn.ELU, nn.CELU, nn.SELU, nn.GELU, nn.Hardshrink, nn.LeakyReLU, nn.LogSigmoid, nn.Softplus,
    nn.Softshrink, nn.Softsign, nn.Tanhshrink,
)
_SPATIAL_2D = (
    nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d, nn.LPPool2d, nn.ZeroPad2d,
    nn.ConstantPad2d, nn.ReflectionPad2d, nn.ReplicationPad2d, nn.CircularPad2d,
)
"""Layers that act on each channel of an image alone, so also on the K·C channels of K models' images."""
_PER_EXAMPLE_MODULES = ("activation", "pooling", "dropout", "flatten", "padding", "pixelshuffle", "channelshuffle")
"""``torch.nn.modules`` submodules whose tensor-free layers act on each example alone (unless they reduce over
dimension 0, or draw random numbers)."""


@dataclass(frozen=True, eq=False)
class Layer:
    """One leaf of the stack: its kind, its parameters' name prefix, the module, one example's input shape, and for
    linear and convolution layers whether per-example gradients are formed (``materialise``); for a ghost-normed
    convolution the rows and columns of the padded input map that each kernel offset reads, and on a small map
    their pair map (``conv_ghost.pair_map``)."""

    kind: Kind
    prefix: str
    module: nn.Module
    in_shape: tuple[int, ...]
    materialise: bool = False
    offsets: Offsets = ()
    out_shape: tuple[int, ...] = ()
    pairs: torch.Tensor | None = None


@dataclass(frozen=True, eq=False)
class Plan:
    """The stack's leaves in execution order and the elements one example of one model needs in a pass."""

    layers: tuple[Layer, ...]
    elements_per_example: int

    def examples_per_call(self, models: int, element_size: int, budget: int) -> int:
        """How many examples of ``models`` models one pass may take so that its tensors fit ``budget`` bytes."""
        return max(1, budget // max(1, models * element_size * self.elements_per_example))


def _leaves(module: nn.Module, prefix: str = "") -> list[tuple[str, nn.Module]] | None:
    """The leaves of nested ``nn.Sequential`` containers in execution order, None if any container is not one."""
    children = list(module.named_children())
    if not children:
        return [(prefix, module)]
    if type(module) is not nn.Sequential:
        return None
    out: list[tuple[str, nn.Module]] = []
    for name, child in children:
        sub = _leaves(child, f"{prefix}{name}.")
        if sub is None:
            return None
        out += sub
    return out


def _tensor_free(module: nn.Module) -> bool:
    return next(module.parameters(recurse=False), None) is None and next(module.buffers(recurse=False), None) is None


def _kind(module: nn.Module) -> Kind | Literal["skip"] | None:
    """What the ghost path does with a leaf: a parametrised kind, "channelwise" / "free" (tensor-free, per
    example), "skip" (identity: Identity, dropout in eval mode or with p = 0), or None (unsupported)."""
    kind = type(module)
    if kind is nn.Linear:
        return "linear"
    if kind is nn.Conv2d:
        ok = module.groups == 1 and module.padding_mode == "zeros" and not isinstance(module.padding, str)
        return "conv" if ok else None
    if kind is nn.GroupNorm:
        return "group_norm" if module.affine else None
    if not _tensor_free(module):
        return None
    if kind is nn.Identity or (isinstance(module, nn.modules.dropout._DropoutNd)
                               and (not module.training or module.p == 0)):
        return "skip"
    if kind.__module__.rsplit(".", 1)[0] != "torch.nn.modules" or kind.__module__.rsplit(".", 1)[1] not in (
        _PER_EXAMPLE_MODULES
    ):
        return None
    if isinstance(module, nn.modules.dropout._DropoutNd | nn.FractionalMaxPool2d | nn.FractionalMaxPool3d):
        return None  # random: under vmap too
    if (kind is nn.RReLU and module.training) or getattr(module, "return_indices", False):
        return None
    if any(getattr(module, a, None) == 0 for a in ("dim", "start_dim")) or getattr(module, "dim", 1) is None:
        return None  # would reach across examples (Softmax(dim=0), Flatten(0)) or pick a dim from the rank
    return "channelwise" if isinstance(module, _ELEMENTWISE + _SPATIAL_2D) else "free"


def plan(module: nn.Module, input_shape: tuple[int, ...]) -> Plan | None:
    """The ghost-clipping plan for ``module`` on records of ``input_shape``, or None when it does not qualify."""
    leaves = _leaves(module)
    if leaves is None:
        return None
    kinds = [_kind(m) for _, m in leaves]
    if None in kinds or not {"linear", "conv", "group_norm"} & set(kinds):
        return None
    names = [n for n, _ in module.named_parameters()]
    if sorted(names) != sorted(p + n for p, m in leaves for n, _ in m.named_parameters()):
        return None  # parameters shared between layers
    layers: list[Layer] = []
    elements = 0
    h = torch.zeros(1, *input_shape, dtype=next(module.parameters()).dtype)
    with torch.no_grad():
        for (prefix, m), kind in zip(leaves, kinds):
            if kind == "skip":
                continue
            try:
                out = m(h)
            except (RuntimeError, ValueError, TypeError):
                return None
            if not isinstance(out, torch.Tensor) or out.shape[0] != 1:
                return None
            in_shape, out_shape = tuple(h.shape[1:]), tuple(out.shape[1:])
            if kind == "channelwise" and len(in_shape) != 3:
                kind = "free"
            assert kind is not None  # ``None in kinds`` returned above
            materialise, offsets, pairs = False, cast(Offsets, ()), None
            if kind in ("linear", "conv"):
                assert isinstance(m, nn.Linear | nn.Conv2d)  # ``_kind``'s types for these kinds
                O, P = m.weight.shape[0], m.weight[0].numel()
                L = out[0, 0].numel() if kind == "conv" else out[0, ..., 0].numel()
                materialise = O * P <= 2 * L * L  # Bu et al. 2022: form G·Aᵀ unless the L×L Gram is smaller
                if kind == "conv":
                    offsets = conv_offsets(cast(nn.Conv2d, m), in_shape, out_shape)
                if kind == "conv" and not materialise:
                    pairs = pair_map(offsets, in_shape, out_shape)
                    L_in = in_shape[1] * in_shape[2]
                    elements += in_shape[0] * L_in + 2 * L_in * L_in + 3 * L * L
                elif kind == "conv":
                    elements += P * L + O * P
                else:
                    elements += 2 * L * L if L > 1 else 0
            elements += h[0].numel() + 3 * out[0].numel()
            layers.append(Layer(kind, prefix, m, in_shape, materialise, offsets, out_shape, pairs))
            h = out
    if h.ndim != 2:
        return None  # the loss wants [examples, classes] logits
    return Plan(tuple(layers), max(1, elements))
