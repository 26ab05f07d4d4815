"""DP-SGD's clipped sum for K models of a plain layer stack, without ``vmap(grad)``'s per-example backward passes.

A module qualifies when it is an ``nn.Sequential`` (nested ones allowed) whose leaves with parameters are exactly
``nn.Linear``, ``nn.Conv2d`` (groups 1, zero padding, any stride and dilation) or ``nn.GroupNorm`` (affine), and
whose other leaves are torch.nn layers that hold no tensors and act on each example alone (activations, pooling,
padding, dropout in eval mode, Flatten, Identity). ``ghost_plan.plan`` decides that once per architecture
(``Template.ghost``); anything else keeps the general ``vmap(grad)`` path.

One step, all K models and B examples at once. Images travel as [B, K·C, H, W] in channels-last memory (a
convolution of K models is one grouped convolution, a GroupNorm one group norm of K·G groups, activations and
2-d pooling act on the K·C channels directly); other tensors as [B, K, ...].

1. A forward pass keeps each parametrised layer's input (GroupNorm: its normalised input).
2. One backward pass of the summed loss to each parametrised layer's output gives every example's output gradient
   G (examples never mix, so it is that example's own), and no weight gradient.
3. Per-example squared norms, layer by layer. A layer z = W·a over L positions has the per-example gradient
   G·Aᵀ (A [P, L]: a convolution's unfolded input, P = C·kh·kw; a linear layer's input, L = 1 or its extra
   dimensions). Either it is formed (``materialise``, O·P numbers per example) or its norm is the "ghost" norm
   ||G·Aᵀ||² = ⟨AᵀA, GᵀG⟩ (L² per example; Li et al. 2021), whichever needs less memory (Bu et al. 2022's mixed
   rule: materialise when O·P ≤ 2L²). For a convolution AᵀA comes from the Gram matrix of the padded input map
   (C·(H_p·W_p)² work) summed over the kernel's offsets, so the input is never unfolded. GroupNorm's per-example
   gradients (per-channel sums over positions) are formed directly. Linear layers with L = 1: ||a||²·||δ||².
4. Clip factors c = min(1, C/||g||) (0 on padding rows), then the clipped sum of each layer's weight gradient as
   one ordinary batched weight gradient of c-scaled output gradients (a grouped convolution's weight backward, a
   batched matmul): the cost of a non-private backward. Where the compiled kernels run, a ghost-normed
   convolution's sum comes from ``conv_sum.weight_sum`` and the dense head's (linear layers of one position:
   norms, factors and sums) from ``dense_kernel``.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from arena.engine import conv_forward, conv_kernel, conv_sum, dense_kernel, dpsgd
from arena.engine.conv_ghost import conv_ghost_norm, positions_first, unfold
from arena.engine.ghost_plan import Layer, Plan


class _Activation:
    """A tensor of K models' examples in one of two layouts: ``image`` [B, K·C, H, W] (channels-last) or [B, K, ...]."""

    def __init__(self, t: torch.Tensor, K: int, image: bool) -> None:
        self.t, self.K, self.image = t, K, image

    def as_image(self) -> torch.Tensor:
        if self.image:
            return self.t
        B, K, C = self.t.shape[:3]
        return self.t.reshape(B, K * C, *self.t.shape[3:]).contiguous(memory_format=torch.channels_last)

    def as_models(self) -> torch.Tensor:
        if not self.image:
            return self.t
        return cast(torch.Tensor, _ModelsFirst.apply(self.t, self.K))


class _ModelsFirst(torch.autograd.Function):
    """[B, K·C, H, W] channels-last → contiguous [B, K, C, H, W], whose gradient goes back in channels-last memory:
    a plain copy would hand the layer before it (pooling, an activation) its output gradient in the other layout,
    and their CPU kernels on mixed layouts run ~10-30× slower."""

    @staticmethod
    def forward(ctx, t: torch.Tensor, K: int) -> torch.Tensor:  # noqa: ANN001 - autograd's context
        B, KC = t.shape[:2]
        return t.view(B, K, KC // K, *t.shape[2:]).contiguous()

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> tuple[torch.Tensor, None]:  # noqa: ANN001
        B, K, C = g.shape[:3]
        return g.reshape(B, K * C, *g.shape[3:]).contiguous(memory_format=torch.channels_last), None


def _forward(
    layers: tuple[Layer, ...], params: dict[str, torch.Tensor], x: torch.Tensor
) -> tuple[torch.Tensor, list[tuple[Layer, torch.Tensor, torch.Tensor]]]:
    """Logits [B, K, classes] of x [B, K, *input] and, per parametrised layer, (layer, saved input, output): a
    convolution's and GroupNorm's as [B, K·C, H, W] (GroupNorm: the normalised input), a linear layer's [B, K, ...]."""
    B, K = x.shape[:2]
    saved = []
    h = _Activation(x, K, False)
    for layer in layers:
        m = layer.module
        if layer.kind == "channelwise":
            h = _Activation(m(h.as_image()), K, True)
            continue
        if layer.kind == "free":
            t = h.as_models()
            out = m(t.reshape(B * K, *t.shape[2:]))
            h = _Activation(out.reshape(B, K, *out.shape[1:]), K, False)
            continue
        w = params[layer.prefix + "weight"]
        b = params.get(layer.prefix + "bias")
        if layer.kind == "conv":
            m = cast(nn.Conv2d, m)
            a = h.as_image()
            z = conv_forward.conv2d(m, a, w, b, K, cast(tuple[int, int], layer.out_shape[1:]))
            if z is None:
                z = F.conv2d(a, conv_forward.grouped_weight(w), None if b is None else b.reshape(-1), m.stride,
                             m.padding, m.dilation, K)
        elif layer.kind == "linear":
            a = h.as_models()
            if a.ndim == 3:  # [B, K, f]: a batched matmul over models, cheaper to dispatch than einsum
                z = torch.bmm(a.transpose(0, 1), w.mT).transpose(0, 1)
            else:
                z = torch.einsum("bk...f,kof->bk...o", a, w)
            if b is not None:
                z = z + b.view(1, K, *[1] * (a.ndim - 3), -1)
        else:  # group norm: normalise the K·C channels in K·G groups, then each model's affine map
            m = cast(nn.GroupNorm, m)
            assert b is not None  # ``_kind`` admits affine GroupNorms only
            if len(layer.in_shape) == 3:
                a = F.group_norm(h.as_image(), K * m.num_groups, eps=m.eps)
            else:
                t = h.as_models()
                a = F.group_norm(t.reshape(B, -1, *t.shape[3:]), K * m.num_groups, eps=m.eps)
            shape = (1, -1, *[1] * (a.ndim - 2))
            z = a * w.reshape(shape) + b.reshape(shape)
        if not z.requires_grad:
            z.requires_grad_()
        saved.append((layer, a.detach(), z))
        if layer.kind == "linear" or z.ndim == 4:
            h = _Activation(z, K, layer.kind != "linear")
        else:  # a GroupNorm on [B, K·C, ...] other than images
            h = _Activation(z.view(B, K, *layer.in_shape), K, False)
    return h.as_models(), saved


def _sq(t: torch.Tensor, B: int, K: int) -> torch.Tensor:
    """Squared L2 norm of each (example, model) slice of t [B, K·...] or [B·K, ...] → [B, K]."""
    return torch.linalg.vector_norm(t.reshape(B, K, -1), dim=-1).square()


Held = dict[str, torch.Tensor]
"""Per-example gradients a layer's norm computation formed and its clipped sum reuses: "weight" [B, K, O, P] when
materialised, "bias" [B, K, O], GroupNorm's "weight" [B, K, C]."""


@torch.no_grad()
def _norms(
    saved: list[tuple[Layer, torch.Tensor, torch.Tensor]], grads: tuple[torch.Tensor, ...], sq: torch.Tensor
) -> list[Held]:
    """Each layer's ``Held``; the per-example squared gradient norms over all parameters of the given layers added
    into ``sq`` [B, K]."""
    B, K = sq.shape
    held: list[Held] = []
    for (layer, a, _), G in zip(saved, grads):
        kept: Held = {}
        held.append(kept)
        if layer.kind == "group_norm":
            dims = tuple(range(2, G.ndim))
            kept["weight"] = ((a * G).sum(dims) if dims else a * G).view(B, K, -1)
            kept["bias"] = (G.sum(dims) if dims else G).view(B, K, -1)
            sq += _sq(kept["weight"], B, K) + _sq(kept["bias"], B, K)
            continue
        if layer.kind == "conv":
            done = conv_kernel.norms(cast(nn.Conv2d, layer.module), a, G, K, layer.materialise)
            if done is not None:  # the compiled kernel read the channels-last maps as they are
                sq += done.sq
                kept.update(done.held)
                continue
        if _one_position(layer, G):  # ||G·aᵀ||² = ||a||²·||G||², the bias's ||G||²
            bias = layer.module.bias is not None
            if bias:
                kept["bias"] = G
            sq += (_sq(a, B, K) + float(bias)) * _sq(G, B, K)
            continue
        Gl = positions_first(G, K) if layer.kind == "conv" else G.reshape(B * K, -1, G.shape[-1])  # [BK, L, O]
        if layer.module.bias is not None:
            kept["bias"] = (G.sum((2, 3)) if layer.kind == "conv" else Gl.sum(1)).view(B, K, -1)
            sq += _sq(kept["bias"], B, K)
        Gm = Gl.mT  # [BK, O, L]
        if layer.kind == "linear":
            A = a.reshape(B * K, -1, a.shape[-1])  # [BK, L, P]
            if layer.materialise:
                kept["weight"] = torch.bmm(Gm, A).view(B, K, *Gm.shape[1:2], -1)
                sq += _sq(kept["weight"], B, K)
            else:
                sq += (torch.bmm(A, A.mT) * torch.bmm(Gm.mT, Gm)).sum((1, 2)).view(B, K)
        elif layer.materialise:
            A = unfold(a, cast(nn.Conv2d, layer.module))  # [B, K·P, L]
            weight = torch.bmm(A.view(B * K, -1, A.shape[-1]), Gl).mT  # [BK, O, P]: Aᵀ·Gᵀ, the cheaper product
            kept["weight"] = weight.view(B, K, *weight.shape[1:])
            sq += torch.linalg.vector_norm(kept["weight"], dim=(2, 3)).square()
        else:
            sq += conv_ghost_norm(layer.in_shape, layer.out_shape, layer.offsets, layer.pairs, a, Gl, B, K)
    return held


def _one_position(layer: Layer, G: torch.Tensor) -> bool:
    """A linear layer on one vector an example ([B, K, features]): its per-example gradient is an outer product."""
    return layer.kind == "linear" and G.ndim == 3


Sums = dict[str, torch.Tensor]
"""Clipped sums of whole parameters [K, ...], by name."""


@torch.no_grad()
def _clip(
    params: dict[str, torch.Tensor], saved: list[tuple[Layer, torch.Tensor, torch.Tensor]],
    grads: tuple[torch.Tensor, ...], B: int, K: int, clip: float, scale: float, valid: torch.Tensor | None,
) -> tuple[torch.Tensor, list[Held], Sums]:
    """The clip factors [K, B] (min(1, C/||g||) times ``scale``, 0 where ``valid`` [K, B] is False), each layer's
    ``Held``, and the clipped sums already made: the linear layers of one position (a stack's dense tail) go to
    the dense kernel (``dense_kernel``) where it runs, with the other layers' squared norms, so that their norms,
    the factors, the scaled sides and the bias sums are one call (at K = 1, ~75 µs of small tensor calls fewer)."""
    tail = [i for i, ((layer, _, _), G) in enumerate(zip(saved, grads)) if _one_position(layer, G)]
    sq, held = grads[0].new_zeros(B, K), [cast(Held, {}) for _ in saved]

    def norms(layers: list[int]) -> None:
        for i, h in zip(layers, _norms([saved[i] for i in layers], tuple(grads[i] for i in layers), sq)):
            held[i] = h

    norms([i for i in range(len(saved)) if i not in tail])
    inputs, deltas = [saved[i][1].transpose(0, 1) for i in tail], [grads[i].transpose(0, 1) for i in tail]  # [K, B, ·]
    done = dense_kernel.clipped(inputs, deltas, clip, valid, scale, extra=sq.T) if tail else None
    if done is None:
        norms(tail)
        c = dpsgd.clip_factors(sq.sqrt(), clip, scale).T
        return (c if valid is None else c * valid.to(c.dtype)).contiguous(), held, {}
    ready: Sums = {}
    for i, (weight, bias) in zip(tail, dpsgd.kernel_sums(inputs, deltas, done)):
        prefix = saved[i][0].prefix
        ready[prefix + "weight"] = weight.mT  # [K, out, in], contiguous
        if prefix + "bias" in params:
            ready[prefix + "bias"] = bias
    return done.factors, held, ready


@torch.no_grad()
def _accumulate(
    params: dict[str, torch.Tensor], saved: list[tuple[Layer, torch.Tensor, torch.Tensor]],
    grads: tuple[torch.Tensor, ...], held: list[Held], factors: torch.Tensor, ready: Sums,
) -> dict[str, torch.Tensor]:
    """Σ_b c[k, b] · (example b's gradient of model k) for every parameter (``factors`` c [K, B]), as fresh
    contiguous tensors shaped like ``params``: ``ready``'s where made, from the per-example gradients in ``held``
    where formed, else as one batched weight gradient with c folded into the smaller of the layer's input and its
    output gradient."""
    K, B = factors.shape
    rows = factors.unsqueeze(1)  # [K, 1, B]: Σ_b c[k, b]·t[b, k] as one batched matmul (einsum dispatches ~3×
    # slower); contiguous, or bmm multiplies model by model (at K = 16, 36 against 10 µs a tensor)
    c = factors.T  # [B, K]
    out: dict[str, torch.Tensor] = {k: v.view(params[k].shape) for k, v in ready.items()}

    def weighted(t: torch.Tensor, name: str) -> None:  # t [B, K, ...] → out[name] [K, ...]
        out[name] = torch.bmm(rows, t.reshape(B, K, -1).transpose(0, 1)).view(params[name].shape)

    for (layer, a, _), G, kept in zip(saved, grads, held):
        m, name = layer.module, layer.prefix + "weight"
        if name in ready:
            continue
        if layer.prefix + "bias" in params:
            weighted(kept["bias"], layer.prefix + "bias")
        if "weight" in kept:
            weighted(kept["weight"], name)
        elif layer.kind == "conv":
            out[name] = _conv_weight_sum(cast(nn.Conv2d, m), a, G, params[name], factors)
        else:  # [K, O, B·L] @ [K, B·L, F]
            Gc = (G * c.reshape(B, K, *[1] * (G.ndim - 2))).transpose(0, 1).reshape(K, -1, G.shape[-1])
            out[name] = torch.bmm(Gc.mT, a.transpose(0, 1).reshape(K, -1, a.shape[-1]))
    return {k: out[k] for k in params}  # the parameters' order


def mean_gradient(
    plan: Plan, params: dict[str, torch.Tensor], X: torch.Tensor, y: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Non-private training on the same layer-by-layer path, without ``vmap``: per model, the gradient of the mean
    cross-entropy over its batch. X [K, B, *input], y [K, B]; ``params`` [K, ...]. A first convolution's gradients
    come from its output's, as in DP-SGD's clipped sum (nothing flows back to the input): its forward may then run by
    ``conv_forward``'s kernel and its weight gradient by ``conv_sum.weight_sum``, with no Python backward. Only
    where that kernel takes the layer: elsewhere oneDNN's weight backward inside autograd's was as fast (K = 16)."""
    K, B = X.shape[:2]
    layer = plan.layers[0]
    first = layer if layer.kind == "conv" and conv_forward.takes(cast(nn.Conv2d, layer.module), (X, *(
        params[n] for n in (layer.prefix + "weight", layer.prefix + "bias") if n in params)), K) else None
    own = () if first is None else (first.prefix + "weight", first.prefix + "bias")
    weights = {k: v.detach() if k in own else v.detach().requires_grad_() for k, v in params.items()}
    wanted = [k for k in weights if k not in own]
    with torch.enable_grad():
        logits, saved = _forward(plan.layers, weights, X.transpose(0, 1))
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.transpose(0, 1).reshape(-1), reduction="sum")
        grads = torch.autograd.grad(loss / B, [weights[k] for k in wanted] + [z for _, _, z in saved[:1] if first])
    out = dict(zip(wanted, grads))
    if first is not None:
        (_, a, _), G = saved[0], grads[-1]
        out[first.prefix + "weight"] = _conv_weight_sum(cast(nn.Conv2d, first.module), a, G,
                                                        weights[first.prefix + "weight"], None)
        if first.prefix + "bias" in weights:
            out[first.prefix + "bias"] = G.sum((0, 2, 3)).view(K, -1)
    return {k: out[k] for k in params}


def _conv_weight_sum(m: nn.Conv2d, a: torch.Tensor, G: torch.Tensor, w: torch.Tensor,
                     factors: torch.Tensor | None) -> torch.Tensor:
    """Σ_b factors[k, b]·(example b's weight gradient) [K, O, C, kh, kw] of convolution ``m`` of K models (weights
    ``w``) from its input a and output gradient G ([B, K·C, H, W], [B, K·O, Ho, Wo]); factors None: 1. By
    ``conv_sum``'s kernel, else one grouped convolution's weight backward (oneDNN) with the factors folded into the
    smaller of a and G."""
    K = w.shape[0]
    done = conv_sum.weight_sum(m, a, G, factors, K)
    if done is not None:
        return done
    if factors is not None:
        B = a.shape[0]

        def scaled(t: torch.Tensor) -> torch.Tensor:  # t [B, K·C, H, W], channels-last kept
            return (t.view(B, K, -1, *t.shape[2:]) * factors.T.reshape(B, K, 1, 1, 1)).view(t.shape)

        G, a = (scaled(G), a) if G.numel() <= a.numel() else (G, scaled(a))
    _, gw, _ = torch.ops.aten.convolution_backward(
        G, a, w.reshape(-1, *w.shape[2:]), None, list(m.stride), list(m.padding), list(m.dilation), False, [0, 0],
        K, [False, True, False],
    )
    return gw.contiguous().view(w.shape)  # mkldnn may hand it back in channels-last strides


def clipped_sum(
    plan: Plan,
    params: dict[str, torch.Tensor],
    X: torch.Tensor,
    y: torch.Tensor,
    valid: torch.Tensor | None,
    clip: float,
    examples_per_call: int,
    scale: float = 1.0,
) -> dict[str, torch.Tensor]:
    """Per model, Σ over its batch of each example's gradient clipped to L2 norm ``clip`` over all parameters,
    times ``scale`` (folded into the clip factors) (``valid`` [K, B] False: the row contributes nothing).
    X [K, B, *input], y [K, B]; ``params`` [K, ...]."""
    weights = {k: v.detach() for k, v in params.items()}
    total: dict[str, torch.Tensor] | None = None
    for start in range(0, X.shape[1], examples_per_call):
        sl = slice(start, start + examples_per_call)
        x, t = X[:, sl].transpose(0, 1), y[:, sl].transpose(0, 1)  # [B, K, ...]
        with torch.enable_grad():
            logits, saved = _forward(plan.layers, weights, x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), t.reshape(-1), reduction="sum")
            grads = torch.autograd.grad(loss, [z for _, _, z in saved])
        mask = None if valid is None else valid[:, sl]
        factors, held, ready = _clip(weights, saved, grads, x.shape[0], x.shape[1], clip, scale, mask)
        part = _accumulate(weights, saved, grads, held, factors, ready)
        total = part if total is None else {k: total[k].add_(v) for k, v in part.items()}
    return total if total is not None else {k: torch.zeros_like(v) for k, v in weights.items()}
