"""Gradients of K copies of any module with ``torch.func``: the mean-loss gradient of non-private training and
DP-SGD's clipped, noised sum of per-example gradients (``vmap(grad)``), both batched over models."""

from __future__ import annotations

import os
from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from arena.engine import ghost
from arena.engine.architecture import Architecture, State

Method = Literal["auto", "ghost", "vmap"]


def _loss_fn(arch: Architecture):  # noqa: ANN202 - a function of (params, buffers, x, y)
    module = arch.template().train_module  # train mode: BatchNorm updates the per-model buffers it is given

    def loss(params: State, buffers: State, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(module, (params, buffers), (x,)), y)

    return loss


def mean_gradient(
    arch: Architecture, params: State, buffers: State, X: torch.Tensor, y: torch.Tensor, method: Method = "auto"
) -> State:
    """Per model, the gradient of the mean cross-entropy over its batch: X [K, B, *input_shape], y [K, B].

    ``method`` "auto": a plain layer stack takes the layer-by-layer path of ``arena.engine.ghost`` (the K models'
    convolutions as one grouped convolution in channels-last memory, no ``vmap``); any other module ``vmap`` over
    models of ``grad``, except one model alone, which skips ``vmap`` (its fixed cost is most of a small step).
    "ghost" / "vmap" force a path (equal to float tolerance: the tests compare them)."""
    plan = arch.template().ghost
    if method == "ghost" and plan is None:
        raise ValueError(f"model {arch.model.name!r} is not a stack of layers the layer-by-layer path supports")
    if plan is not None and method != "vmap":
        return ghost.mean_gradient(plan, params, X, y)
    if X.shape[0] == 1 and method == "auto":
        one = grad(_loss_fn(arch))({k: v[0] for k, v in params.items()}, {k: v[0] for k, v in buffers.items()},
                                   X[0], y[0])
        return {k: v.unsqueeze(0) for k, v in one.items()}
    return vmap(grad(_loss_fn(arch)))(params, buffers, X, y)


def _per_example_fn(arch: Architecture):  # noqa: ANN202
    loss = _loss_fn(arch)

    def one(params: State, buffers: State, x: torch.Tensor, y: torch.Tensor) -> State:
        return grad(loss)(params, buffers, x.unsqueeze(0), y.unsqueeze(0))

    return vmap(vmap(one, in_dims=(None, None, 0, 0)), in_dims=(0, 0, 0, 0))


def examples_per_call(arch: Architecture, models: int, budget: int, dtype: torch.dtype = torch.float32) -> int:
    """How many examples of ``models`` models one ``clipped_sum`` pass may take within ``budget`` bytes: per
    example, the ghost path keeps activations and per-layer norms' operands, ``vmap(grad)`` a full gradient."""
    template = arch.template()
    if template.ghost is not None:
        size = torch.empty((), dtype=dtype).element_size()
        return template.ghost.examples_per_call(models, size, budget)
    return max(1, budget // max(1, 8 * models * template.n_params))


PASS_BYTES = int(float(os.environ.get("ARENA_PASS_MB", "64")) * 2**20)
"""Bytes of activations one pass over a step's models may touch (``ARENA_PASS_MB``): passes this small keep a
layer's maps in cache between the ops that read them. On a 2-core AMD EPYC (32 MiB of L3) the digits CNN's
non-private step of 64 models took ~10 % less in passes of 16 models than in one (the grouped convolutions and
their activations' elementwise ops ran at twice the speed per model)."""
PASS_OVERHEAD = 1 << 21
"""A pass's fixed cost (its ops' dispatch, the kernels' calls) in elements of per-example work: ~1-1.5 ms, ~100
model-rows of the digits CNN (17,000 elements an example)."""


class PassShape(NamedTuple):
    """How a step's models go through the layers: at most ``models`` a pass, a pass costing as much as ``rows``
    extra model-rows (``batching.model_passes``)."""

    models: int
    rows: float


def pass_shape(
    arch: Architecture, batch: int, dtype: torch.dtype = torch.float32, device: torch.device | None = None
) -> PassShape:
    """Passes for steps of ``batch`` expected rows. On the CPU's layer-by-layer path, as many models as fit
    ``PASS_BYTES`` of activations (``Plan.elements_per_example``); elsewhere all of them (a GPU wants wide calls;
    ``vmap(grad)`` was not measured). The pass cost per element of an example's work: the plan's, or
    ``vmap(grad)``'s per-example gradient and activations (~2 parameters' worth)."""
    template = arch.template()
    plan = template.ghost
    elements = plan.elements_per_example if plan is not None else 2 * template.n_params
    models = 1 << 62
    if plan is not None and (device is None or device.type == "cpu"):
        size = torch.empty((), dtype=dtype).element_size()
        models = max(1, PASS_BYTES // max(1, batch * elements * size))
    return PassShape(models, PASS_OVERHEAD / max(1, elements))


def clipped_sum(
    arch: Architecture,
    params: State,
    buffers: State,
    X: torch.Tensor,
    y: torch.Tensor,
    valid: torch.Tensor | None,
    clip: float,
    examples_per_call: int,
    method: Method = "auto",
    scale: float = 1.0,
) -> State:
    """Per model, the sum over its batch of per-example gradients each clipped to L2 norm ``clip`` over all
    parameters together (flat clipping); rows where ``valid`` [K, B] is False contribute nothing. Examples go
    ``examples_per_call`` at a time, so memory stays within budget for any batch.

    ``method``: "ghost" (``arena.engine.ghost``: per-example norms from each layer's inputs and output gradients,
    no per-example backward pass; stacks of linear, convolution and GroupNorm layers only), "vmap" (per-example
    gradients by ``vmap(grad)``, any module), "auto": ghost wherever the architecture allows it. ``scale``
    multiplies every clipped gradient (folded into the clip factors: DP-SGD's 1 / expected batch size)."""
    plan = arch.template().ghost
    if method == "ghost" and plan is None:
        raise ValueError(f"model {arch.model.name!r} is not a stack of layers that ghost clipping supports")
    if plan is not None and method != "vmap":
        return ghost.clipped_sum(plan, params, X, y, valid, clip, examples_per_call, scale)
    per_example = _per_example_fn(arch)
    total = {k: torch.zeros_like(v) for k, v in params.items()}
    for start in range(0, X.shape[1], examples_per_call):
        sl = slice(start, start + examples_per_call)
        g = per_example(params, buffers, X[:, sl], y[:, sl])
        sq = sum(torch.linalg.vector_norm(t.reshape(*t.shape[:2], -1), dim=-1).square() for t in g.values())
        factor = (clip * scale / sq.sqrt()).clamp(max=scale)
        if valid is not None:
            factor = factor * valid[:, sl].to(factor.dtype)
        for k, t in g.items():
            total[k] += torch.einsum("kb,kb...->k...", factor, t)
    return total
