"""DP-SGD's clipped sum for K models of a plain layer stack, without ``vmap(grad)``'s per-example backward passes.

A module qualifies when it is an ``nn.Sequential`` (nested ones allowed) whose leaves with parameters are exactly
``nn.Linear``, ``nn.Conv2d`` (groups 1, zero padding, any stride and dilation) or ``nn.GroupNorm``, and whose
other leaves hold no tensors and act on each example alone (activations, pooling, dropout, Flatten, Identity).
``plan`` decides that once per architecture; anything else keeps the general ``vmap(grad)`` path.

One step, all K models and B examples at once (layout [B, K, ...]: a convolution of K models is one grouped
convolution on [B, K·C, H, W], a GroupNorm one group norm with K·G groups):

1. a forward pass that keeps each parametrised layer's input (or GroupNorm's normalised input);
2. one backward pass of the summed loss to every parametrised layer's output, giving each example's output
   gradient G (examples never mix, so this is each example's own gradient), without any weight gradient;
3. per-example squared gradient norms, layer by layer: for a layer computing z = W·a over L positions (a
   convolution's unfolded input A [P, L] with P = C·kh·kw, or a linear layer's input, L = 1 or its extra
   dimensions) the gradient is G·Aᵀ and ||G·Aᵀ||² = ⟨AᵀA, GᵀG⟩ ("ghost" norm, Li et al. 2021; L² per example)
   or, when smaller, the per-example gradient is formed and kept (O·P per example: Bu et al. 2022's mixed
   rule); GroupNorm's per-example gradients (per channel sums over positions) are formed directly;
4. clip factors c = min(1, C/||g||) (0 on padding rows) and the clipped sum Σ_b c_b·G_b·A_bᵀ as one batched
   matmul per layer (or Σ_b c_b·g_b over the kept per-example gradients).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

Kind = Literal["linear", "conv", "group_norm", "free"]

_FREE_MODULES = ("activation", "pooling", "dropout", "flatten", "padding", "pixelshuffle", "channelshuffle")
"""``torch.nn.modules`` submodules whose tensor-free layers act on each example alone."""
_BATCH_DIM_ARGS = ("dim", "start_dim")
"""Attributes that would make a tensor-free layer reach across examples when 0 (Softmax(dim=0), Flatten(0))."""


@dataclass(frozen=True)
class Layer:
    """One leaf of the stack: its kind, its parameters' name prefix, the module (for hyper-parameters and
    tensor-free layers), and for linear and convolution layers whether per-example gradients are formed
    (``materialise``) instead of ghost norms."""

    kind: Kind
    prefix: str
    module: nn.Module
    materialise: bool = False


@dataclass(frozen=True)
class Plan:
    """The stack's leaves in execution order and the elements one example of one model needs in a step."""

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


def _free(module: nn.Module) -> bool:
    """A tensor-free layer from torch.nn that acts on each example alone."""
    if next(module.parameters(recurse=False), None) is not None or next(module.buffers(recurse=False), None):
        return False
    if type(module) is nn.Identity:
        return True
    if not type(module).__module__.startswith("torch.nn.modules."):
        return False
    if type(module).__module__.rsplit(".", 1)[1] not in _FREE_MODULES:
        return False
    if any(getattr(module, a, None) == 0 for a in _BATCH_DIM_ARGS):
        return False
    if getattr(module, "dim", 1) is None:
        return False  # Softmax(dim=None) picks a dimension from the input's rank, which the model axis changes
    return not module.training or not isinstance(module, nn.modules.dropout._DropoutNd)


def _kind(module: nn.Module) -> Kind | None:
    if type(module) is nn.Linear:
        return "linear"
    if type(module) is nn.Conv2d:
        ok = module.groups == 1 and module.padding_mode == "zeros" and not isinstance(module.padding, str)
        return "conv" if ok else None
    if type(module) is nn.GroupNorm:
        return "group_norm" if module.affine else None
    return "free" if _free(module) else None


def plan(module: nn.Module, input_shape: tuple[int, ...]) -> Plan | None:
    """The ghost-clipping plan for ``module`` on records of ``input_shape``, or None when it does not qualify."""
    leaves = _leaves(module)
    if leaves is None:
        return None
    kinds = [_kind(m) for _, m in leaves]
    if None in kinds or all(k == "free" for k in kinds):
        return None
    names = {n for n, _ in module.named_parameters()}
    layers: list[Layer] = []
    elements = 0
    h = torch.zeros(1, *input_shape)
    with torch.no_grad():
        for (prefix, m), kind in zip(leaves, kinds):
            if {prefix + n for n, _ in m.named_parameters()} - names:
                return None  # shared or re-registered parameters
            try:
                out = m(h)
            except RuntimeError:
                return None
            materialise = False
            if kind in ("linear", "conv"):
                weight = m.weight
                O, P = weight.shape[0], weight[0].numel()
                L = out[0, 0].numel() if kind == "conv" else out[0, ..., 0].numel()
                materialise = O * P <= 2 * L * L  # Bu et al. 2022: form g = G·Aᵀ unless 2L² is smaller
                elements += P * L + (O * P if materialise else 2 * L * L)
            elements += h[0].numel() + 2 * out[0].numel()
            layers.append(Layer(kind, prefix, m, materialise))  # type: ignore[arg-type]
            h = out
    if h.ndim != 2:
        return None  # the loss wants [examples, classes] logits
    return Plan(tuple(layers), max(1, elements))


def _unfold(layer: Layer, a: torch.Tensor) -> torch.Tensor:
    """A layer's per-example inputs as [B·K, P, L] (a convolution's unfolded patches, a linear layer's input)."""
    B, K = a.shape[:2]
    m = layer.module
    if layer.kind == "conv":
        A = F.unfold(a.reshape(B, K * a.shape[2], *a.shape[3:]), m.kernel_size, m.dilation, m.padding, m.stride)
        return A.view(B * K, A.shape[1] // K, A.shape[2])
    return a.reshape(B * K, -1, a.shape[-1]).transpose(1, 2)


def _forward(
    layers: tuple[Layer, ...], params: dict[str, torch.Tensor], x: torch.Tensor
) -> tuple[torch.Tensor, list[tuple[Layer, torch.Tensor, torch.Tensor]]]:
    """Logits [B, K, classes] of x [B, K, *input] and, per parametrised layer, (layer, saved input, output)."""
    B, K = x.shape[:2]
    saved = []
    h = x
    for layer in layers:
        m = layer.module
        if layer.kind == "free":
            out = m(h.reshape(B * K, *h.shape[2:]))
            h = out.reshape(B, K, *out.shape[1:])
            continue
        w = params[layer.prefix + "weight"]
        b = params.get(layer.prefix + "bias")
        if layer.kind == "conv":
            O, C = w.shape[1:3]
            z = F.conv2d(h.reshape(B, K * h.shape[2], *h.shape[3:]), w.reshape(K * O, *w.shape[2:]),
                         None if b is None else b.reshape(K * O), m.stride, m.padding, m.dilation, K)
            z, a = z.view(B, K, O, *z.shape[2:]), h
        elif layer.kind == "linear":
            z = torch.einsum("bk...f,kof->bk...o", h, w)
            if b is not None:
                z = z + b.view(1, K, *[1] * (h.ndim - 3), -1)
            a = h
        else:  # group norm: normalise K·C channels in K·G groups, then each model's affine map
            C = h.shape[2]
            flat = h.reshape(B, K * C, *h.shape[3:])
            a = F.group_norm(flat, K * m.num_groups, eps=m.eps).view(h.shape)
            shape = (1, K, C, *[1] * (h.ndim - 3))
            z = a * w.view(shape) + b.view(shape)
        if not z.requires_grad:
            z.requires_grad_()
        saved.append((layer, a.detach(), z))
        h = z
    return h, saved


@torch.no_grad()
def _norms_and_parts(
    saved: list[tuple[Layer, torch.Tensor, torch.Tensor]], grads: tuple[torch.Tensor, ...]
) -> tuple[torch.Tensor, list[tuple[Layer, tuple[torch.Tensor, ...]]]]:
    """Per-example squared gradient norms [B, K] over all layers, and what each layer's clipped sum needs."""
    B, K = grads[0].shape[:2]
    sq = grads[0].new_zeros(B, K)
    parts = []
    for (layer, a, _), G in zip(saved, grads):
        bias = layer.prefix + "bias" if layer.module.bias is not None else None
        if layer.kind == "group_norm":
            dims = tuple(range(3, G.ndim))
            gw, gb = ((a * G).sum(dims), G.sum(dims)) if dims else (a * G, G)  # [B, K, C] each
            sq += torch.linalg.vector_norm(gw, dim=-1).square() + torch.linalg.vector_norm(gb, dim=-1).square()
            parts.append((layer, (gw, gb)))
            continue
        A = _unfold(layer, a)  # [BK, P, L]
        Gm = G.reshape(B * K, G.shape[2], -1) if layer.kind == "conv" else G.reshape(B * K, -1, G.shape[-1]).mT
        # Gm: [BK, O, L]
        if layer.materialise:
            g = torch.bmm(Gm, A.mT)  # [BK, O, P]: each example's weight gradient
            sq += torch.linalg.vector_norm(g.view(B, K, -1), dim=-1).square()
            held: tuple[torch.Tensor, ...] = (g.view(B, K, *g.shape[1:]),)
        elif A.shape[2] == 1:
            sq += (torch.linalg.vector_norm(A, dim=(1, 2)) * torch.linalg.vector_norm(Gm, dim=(1, 2))).square().view(
                B, K)
            held = (A, Gm)
        else:
            gram = torch.bmm(A.mT, A).mul_(torch.bmm(Gm.mT, Gm))  # [BK, L, L]
            sq += gram.sum((1, 2)).view(B, K)
            held = (A, Gm)
        if bias is not None:
            gb = Gm.sum(-1).view(B, K, -1)
            sq += torch.linalg.vector_norm(gb, dim=-1).square()
            held = (*held, gb)
        parts.append((layer, held))
    return sq, parts


@torch.no_grad()
def _accumulate(
    total: dict[str, torch.Tensor], parts: list[tuple[Layer, tuple[torch.Tensor, ...]]], c: torch.Tensor
) -> None:
    """total[name] += Σ_b c[b, k] · (example b's gradient of model k), for every parameter."""
    B, K = c.shape
    for layer, held in parts:
        weight, bias = total[layer.prefix + "weight"], total.get(layer.prefix + "bias")
        if layer.kind == "group_norm":
            weight += torch.einsum("bk,bkc->kc", c, held[0])
            bias += torch.einsum("bk,bkc->kc", c, held[1])
            continue
        if layer.materialise:
            weight += torch.einsum("bk,bkop->kop", c, held[0]).view(weight.shape)
        else:
            A, Gm = held[0], held[1]  # [BK, P, L], [BK, O, L]
            Gc = (Gm.view(B, K, *Gm.shape[1:]) * c.view(B, K, 1, 1))
            weight += torch.einsum("bkol,bkpl->kop", Gc, A.view(B, K, *A.shape[1:])).view(weight.shape)
        if bias is not None:
            bias += torch.einsum("bk,bko->ko", c, held[-1])


def clipped_sum(
    plan: Plan,
    params: dict[str, torch.Tensor],
    X: torch.Tensor,
    y: torch.Tensor,
    valid: torch.Tensor | None,
    clip: float,
    examples_per_call: int,
) -> dict[str, torch.Tensor]:
    """Per model, Σ over its batch of each example's gradient clipped to L2 norm ``clip`` over all parameters
    (``valid`` [K, B] False: the row contributes nothing). X [K, B, *input], y [K, B]; ``params`` [K, ...]."""
    weights = {k: v.detach() for k, v in params.items()}
    total = {k: torch.zeros_like(v) for k, v in weights.items()}
    for start in range(0, X.shape[1], examples_per_call):
        sl = slice(start, start + examples_per_call)
        x, t = X[:, sl].transpose(0, 1), y[:, sl].transpose(0, 1)  # [B, K, ...]
        with torch.enable_grad():
            logits, saved = _forward(plan.layers, weights, x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), t.reshape(-1), reduction="sum")
            grads = torch.autograd.grad(loss, [z for _, _, z in saved])
        sq, parts = _norms_and_parts(saved, grads)
        c = (clip / sq.sqrt()).clamp_(max=1.0)
        if valid is not None:
            c = c * valid[:, sl].transpose(0, 1).to(c.dtype)
        _accumulate(total, parts, c)
    return total
