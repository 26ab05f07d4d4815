"""Gradients of K copies of any module with ``torch.func``: the mean-loss gradient of non-private training and
DP-SGD's clipped, noised sum of per-example gradients (``vmap(grad)``), both batched over models."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from arena.engine.architecture import Architecture, State


def _loss_fn(arch: Architecture):  # noqa: ANN202 - a function of (params, buffers, x, y)
    module = arch.template().module

    def loss(params: State, buffers: State, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(module, (params, buffers), (x,)), y)

    return loss


def mean_gradient(arch: Architecture, params: State, buffers: State, X: torch.Tensor, y: torch.Tensor) -> State:
    """Per model, the gradient of the mean cross-entropy over its batch: X [K, B, *input_shape], y [K, B]."""
    return vmap(grad(_loss_fn(arch)))(params, buffers, X, y)


def _per_example_fn(arch: Architecture):  # noqa: ANN202
    loss = _loss_fn(arch)

    def one(params: State, buffers: State, x: torch.Tensor, y: torch.Tensor) -> State:
        return grad(loss)(params, buffers, x.unsqueeze(0), y.unsqueeze(0))

    return vmap(vmap(one, in_dims=(None, None, 0, 0)), in_dims=(0, 0, 0, 0))


def clipped_sum(
    arch: Architecture,
    params: State,
    buffers: State,
    X: torch.Tensor,
    y: torch.Tensor,
    valid: torch.Tensor | None,
    clip: float,
    examples_per_call: int,
) -> State:
    """Per model, the sum over its batch of per-example gradients each clipped to L2 norm ``clip`` over all
    parameters together (flat clipping); rows where ``valid`` [K, B] is False contribute nothing. Examples go
    through ``vmap(grad)`` ``examples_per_call`` at a time, so memory stays within budget for any batch."""
    per_example = _per_example_fn(arch)
    total = {k: torch.zeros_like(v) for k, v in params.items()}
    for start in range(0, X.shape[1], examples_per_call):
        sl = slice(start, start + examples_per_call)
        g = per_example(params, buffers, X[:, sl], y[:, sl])
        sq = sum(t.reshape(*t.shape[:2], -1).pow(2).sum(-1) for t in g.values())
        factor = (clip / sq.sqrt()).clamp(max=1.0)
        if valid is not None:
            factor = factor * valid[:, sl].to(factor.dtype)
        for k, t in g.items():
            total[k] += torch.einsum("kb,kb...->k...", factor, t)
    return total
