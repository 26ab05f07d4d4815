"""DP-SGD with augmentation multiplicity (De et al. 2022): each sampled record enters a step as M augmented
views, and its gradient, the one clipped, is the average of the M views' gradients. A record still contributes
one clipped gradient of norm at most C per step, so sampling, clipping, noise and the privacy accounting are those
of DP-SGD (``arena.engine.trainer``); only the gradient estimate is less noisy.

The schedule is the engine's: Poisson batches from each model's seed, noise ``Purpose.NOISE`` of step t, heavy-ball
momentum with ``model.l2`` on weights, the recipe's moving average. View j of step t draws its crops and flips as
the engine's step t·M + j, so with M = 1 this is the engine's DP-SGD (to float tolerance: per-example gradients by
``vmap(grad)`` rather than ghost norms). Any module without batch statistics; records are images.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from arena.engine import dpsgd, instruments, rng
from arena.engine.architecture import Architecture, State, loop_reason
from arena.engine.augment import augment
from arena.engine.batching import poisson_batches, steps_and_rate
from arena.engine.ensemble import init_state
from arena.engine.functional import examples_per_call
from arena.engine.recipe import DPNoise, Recipe
from arena.engine.steps import MEMORY_BUDGET, HeavyBall, shaped_like


def _per_record_fn(arch: Architecture):  # noqa: ANN202 - a function of (params, buffers, views, labels)
    """Per model and per record, the gradient of the mean cross-entropy over the record's M views."""
    module = arch.template().train_module

    def loss(params: State, buffers: State, views: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = functional_call(module, (params, buffers), (views,))
        return F.cross_entropy(out, y.expand(views.shape[0]))

    return vmap(vmap(grad(loss), in_dims=(None, None, 0, 0)), in_dims=(0, 0, 0, 0))


def averaged_clipped_sum(arch: Architecture, params: State, buffers: State, views: torch.Tensor, y: torch.Tensor,
                         valid: torch.Tensor | None, clip: float, per_call: int) -> State:
    """Per model, Σ over its batch of clip_C(mean over the record's views of ∇ loss): views [K, B, M, *input],
    y [K, B]; rows where ``valid`` is False contribute nothing."""
    per_record = _per_record_fn(arch)
    total = {k: torch.zeros_like(v) for k, v in params.items()}
    for start in range(0, views.shape[1], per_call):
        sl = slice(start, start + per_call)
        g = per_record(params, buffers, views[:, sl], y[:, sl])
        sq = cast(torch.Tensor, sum(t.reshape(*t.shape[:2], -1).square().sum(-1) for t in g.values()))
        factor = (clip / sq.sqrt()).clamp(max=1.0)
        if valid is not None:
            factor = factor * valid[:, sl].to(factor.dtype)
        for k, t in g.items():
            total[k] += torch.einsum("kb,kb...->k...", factor, t)
    return total


def train_augmult(arch: Architecture, X: torch.Tensor, y: torch.Tensor, recipe: Recipe, init_seeds: torch.Tensor,
                  train_seeds: torch.Tensor, dp: DPNoise, multiplicity: int, budget: int = MEMORY_BUDGET) -> State:
    """Train K models on X [K, n, d], y [K, n] by DP-SGD whose per-record gradient averages ``multiplicity``
    augmented views (``recipe.augment``) before clipping to ``dp.clip``."""
    K, n, d = X.shape
    if len(arch.input_shape) != 3 or not recipe.augment.active:
        raise ValueError("augmentation multiplicity needs image records and training.augment (crop or flip)")
    if multiplicity < 1:
        raise ValueError("multiplicity must be at least 1")
    inst = instruments.active()
    if inst is not None and (inst.canaries is not None or inst.present is not None):
        raise ValueError("the canary audit instruments the engine's train; augmentation multiplicity is not "
                         "instrumented")
    template = arch.template()
    if template.random:
        raise ValueError(f"augmentation multiplicity runs on the batched engine only, and {loop_reason(arch)}")
    if arch.engine == "loop":
        raise ValueError("augmentation multiplicity runs on the batched engine only, and the track asks for the loop "
                         "engine (engine: loop)")
    state = init_state(arch, init_seeds, X.dtype, X.device)
    params = {k: state[k].clone() for k in template.trainable}
    buffers = {k: state[k] for k in template.buffers}
    names = list(params)
    optimizer = HeavyBall([params[k] for k in names], [k in template.penalised for k in names], recipe, arch.l2)
    sizes, shapes = [params[k][0].numel() for k in names], [params[k].shape for k in names]
    seeds = rng.Keys(train_seeds.to(X.device))
    q = steps_and_rate(n, recipe)[1]
    per_call = max(1, examples_per_call(arch, K, budget, X.dtype) // multiplicity)
    for t, (Xb, yb, valid) in enumerate(poisson_batches(X, y, recipe, seeds)):
        images = Xb.reshape(K, Xb.shape[1], *arch.input_shape)
        views = torch.stack([augment(images, recipe.augment, seeds, t * multiplicity + j)
                             for j in range(multiplicity)], dim=2)
        total = averaged_clipped_sum(arch, params, buffers, views, yb, valid, dp.clip, per_call)
        sums = [total[k] for k in names]
        z = shaped_like(shapes, sizes, rng.normal(seeds, rng.stream(rng.Purpose.NOISE, t), template.n_params, X.dtype))
        optimizer.step(dpsgd.noisy_gradient(sums, dp.clip, dp.noise_multiplier, z, q * n))
    released = dict(zip(names, optimizer.result()))
    return {k: released[k] if k in released else buffers[k] for k in state}
