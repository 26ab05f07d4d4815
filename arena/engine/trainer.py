"""Train K copies of a model at once with momentum SGD or DP-SGD, batched over models.

Every model's randomness (shuffles, Poisson samples, augmentation, noise) comes from its own train seed through
the counter RNG, and models are chunked only along the model axis, so a model trains identically (to float
tolerance) alone or inside any batch. Dense models (logistic regression, MLPs) take the hand-written path, which
``make bench`` shows faster; every other module trains through ``torch.func``, in train mode (BatchNorm on batch
statistics, its running statistics updated in each model's own buffers). A module that draws random numbers in
training (dropout) trains on the loop engine (``arena.engine.loop``), one model at a time with its own seeded draws.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable
from typing import Literal

import torch

from arena.engine import dense as hand
from arena.engine import dpsgd, instruments, loop, rng
from arena.engine.architecture import Architecture, State, batched_problem, loop_reason
from arena.engine.batching import model_passes, steps_and_rate
from arena.engine.dense import Layers
from arena.engine.ensemble import init_state
from arena.engine.functional import PassShape, clipped_sum, examples_per_call, mean_gradient, pass_shape
from arena.engine.recipe import DPNoise, Recipe
from arena.engine.steps import (
    MEMORY_BUDGET,
    NOISE_BLOCK,
    HeavyBall,
    Noise,
    StepNoise,
    noise_of_step,
    shaped_like,
    stream,
)

__all__ = ["MEMORY_BUDGET", "NOISE_BLOCK", "HeavyBall", "Noise", "StepNoise", "choose_engine", "models_per_chunk",
           "shaped_like", "train"]

Engine = Literal["auto", "functional", "dense", "loop"]

def choose_engine(arch: Architecture, engine: Engine = "auto") -> Literal["functional", "dense", "loop"]:
    """The loop engine for a module the batched engine cannot train as written (``loop_reason``) or whose track
    asks for it (``arch.engine == "loop"``), else the hand path for dense models (faster, see
    benchmarks/results.md), ``torch.func`` for everything else. ``engine`` overrides ``arch.engine`` unless
    ``auto``. Asking for a batched path for a module that needs the loop is a ``ValueError`` naming why."""
    if engine == "auto" and arch.engine == "loop":
        engine = "loop"
    elif engine == "auto" and arch.engine == "batched" and (problem := batched_problem(arch)):
        raise ValueError(problem)
    reason = loop_reason(arch)
    if engine in ("dense", "functional") and reason is not None:
        raise ValueError(f"model {arch.model.name!r} cannot train on the batched engine: {reason}")
    if engine == "dense" and arch.dense is None:
        raise ValueError(f"model {arch.model.name!r} has no hand-written path")
    if engine == "auto":
        return "loop" if reason is not None else "dense" if arch.dense is not None else "functional"
    return engine


def models_per_chunk(arch: Architecture, recipe: Recipe, n: int, dp: DPNoise | None, budget: int) -> int:
    """How many models one chunk may train so that its per-example gradients and activations fit ``budget``."""
    params = arch.template().n_params
    batch = min(recipe.batch_size or n, n)
    per_model = 4 * (4 * params + 32 * batch * arch.n_features) + (4 * params * min(batch, 64) if dp else 0)
    return max(1, budget // max(per_model, 1))


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
"""glibc's ``mallopt`` parameters (malloc.h)."""
HEAP_KEPT = 512 << 20
"""Bytes glibc's malloc serves from its heap, and keeps free there, rather than mapping and unmapping them."""


@functools.cache
def _keep_freed_memory() -> None:
    """Once per process, have glibc's malloc serve blocks up to ``HEAP_KEPT`` from its heap and keep that much of
    freed memory there. By default it maps each block past an adaptive threshold (32 MiB at most) afresh and gives
    freed memory past twice that back, so a step's multi-megabyte temporaries fault their pages in at every step:
    an MLP epoch of 64 models took ~5,000-30,000 page faults and ran ~8-20% slower; the digits CNN's DP-SGD epoch
    of 64 models ~14,000 and ~10% slower (a grouped convolution's forward on fresh pages took 2-3× as long). No-op
    where the C library has no ``mallopt``, or with ``ARENA_MALLOC=0``."""
    if os.environ.get("ARENA_MALLOC", "1") == "0":
        return
    try:
        mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    except OSError:
        return
    if mallopt is not None:
        if not mallopt(M_MMAP_THRESHOLD, HEAP_KEPT):  # a glibc that caps the threshold: its own cap
            mallopt(M_MMAP_THRESHOLD, 32 << 20)
        mallopt(M_TRIM_THRESHOLD, HEAP_KEPT)


def train(
    arch: Architecture,
    X: torch.Tensor,
    y: torch.Tensor,
    recipe: Recipe,
    init_seeds: torch.Tensor,
    train_seeds: torch.Tensor,
    dp: DPNoise | None = None,
    state: State | None = None,
    engine: Engine = "auto",
    budget: int = MEMORY_BUDGET,
) -> State:
    """Train K models on X [K,n,d], y [K,n]; loss = mean CE + (l2/2)||weights||², heavy-ball momentum.

    Starts from ``state`` if given (left unmodified), else from ``init_seeds``; follows X's dtype and device.
    """
    K, n, d = X.shape
    if y.shape != (K, n) or init_seeds.shape != (K,) or train_seeds.shape != (K,):
        raise ValueError(f"need y [K,n] and seeds [K] for X of shape {tuple(X.shape)}")
    if d != arch.n_features:
        raise ValueError(f"X has {d} features, the model expects {arch.n_features} (input shape {arch.input_shape})")
    dp = instruments.arm(dp, X, y, recipe)
    _keep_freed_memory()
    if state is None:
        state = init_state(arch, init_seeds, X.dtype, X.device)
    path = choose_engine(arch, engine)
    if path == "loop":


        out = loop.train(arch, X, y, recipe, state, train_seeds, dp, budget)
        instruments.record_return(out)
        return out
    size = models_per_chunk(arch, recipe, n, dp, budget)
    parts = []
    for s in range(0, K, size):
        sl = slice(s, s + size)
        part = {k: v[sl] for k, v in state.items()}
        run = _train_dense if path == "dense" else _train_functional
        parts.append(run(arch, X[sl].contiguous(), y[sl].contiguous(), recipe, part, train_seeds[sl],
                         dp if dp is None else dp.rows(sl), budget))
    out = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    instruments.record_return(out)
    return out


StepSums = Callable[[list[torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor | None], list[torch.Tensor]]
"""A step's per-model sums [K, ...] (the mean gradient, or DP-SGD's clipped sum) of (per-model tensors, X, y,
validity mask)."""


def _in_passes(sums: StepSums, per_model: list[torch.Tensor], Xb: torch.Tensor, yb: torch.Tensor,
               valid: torch.Tensor | None, shape: PassShape) -> list[torch.Tensor]:
    """``sums(per_model, Xb, yb, valid)`` over ``batching.model_passes``: the models in passes of like Poisson
    counts, each padded to its largest. Every model's sums are its own (gradients never mix models), so they are
    the same in any pass."""
    K, B = Xb.shape[:2]
    passes = model_passes(valid, K, B, shape.models, shape.rows)
    if len(passes) == 1:
        return sums(per_model, Xb, yb, valid)
    out: list[torch.Tensor] = []
    for models, rows in passes:  # a slice is a view; indices gather (and the sums scatter back)
        part = sums([t[models] for t in per_model], Xb[models, :rows], yb[models, :rows],
                    None if valid is None else valid[models, :rows])
        out = out or [p.new_zeros(K, *p.shape[1:]) for p in part]
        for o, p in zip(out, part):
            o[models] = p
    return out


def _train_dense(
    arch: Architecture, X: torch.Tensor, y: torch.Tensor, recipe: Recipe, state: State,
    train_seeds: torch.Tensor, dp: DPNoise | None, budget: int,
) -> State:
    """The hand path: explicit backprop and ghost-norm clipping for stacks of linear layers."""
    spec = arch.dense
    assert spec is not None  # ``choose_engine`` picks "dense" only for a dense stack
    names = list(state)
    layers = [p.clone() for p in hand.to_layers(state)]
    optimizer = HeavyBall(layers, [i % 2 == 0 for i in range(len(layers))], recipe, arch.l2)
    seeds = rng.Keys(train_seeds.to(X.device))
    n = X.shape[1]
    steps, q = steps_and_rate(n, recipe)
    noise = Noise(seeds, steps, spec.n_params, X.dtype, functools.partial(hand.unflatten_module_order, spec))
    clip = 0.0 if dp is None else dp.clip

    def clipped(ls: list[torch.Tensor], Xs: torch.Tensor, ys: torch.Tensor, vs: torch.Tensor | None) -> Layers:
        inputs, out = hand.layer_inputs(spec, ls, Xs)
        deltas = hand.backprop(spec, ls, inputs, hand.output_delta(out, ys))
        return dpsgd.clipped_sum(inputs, deltas, clip, vs, scale=1.0 / (q * n))

    for t, (Xb, yb, valid) in enumerate(stream(arch, X, y, recipe, seeds, dp)):
        if dp is None:
            inputs, out = hand.layer_inputs(spec, layers, Xb)
            deltas = hand.backprop(spec, layers, inputs, hand.output_delta(out, yb) / Xb.shape[1])
            grads, step_noise = hand.sum_gradients(inputs, deltas), None
        else:
            sums = clipped(layers, Xb, yb, valid)  # one pass: cutting the padding saves nothing on this path
            canary = None
            if dp.canaries is not None:
                flat = dp.canaries.contribution(seeds, t, q, spec.n_params, dp.clip, X.dtype, X.device)
                canary = hand.unflatten_module_order(spec, flat)
            grads, step_noise = sums, noise_of_step(sums, canary, noise, t, dp, q * n)
        optimizer.step(grads, step_noise)
    return hand.to_state(names, optimizer.result())


def _train_functional(
    arch: Architecture, X: torch.Tensor, y: torch.Tensor, recipe: Recipe, state: State,
    train_seeds: torch.Tensor, dp: DPNoise | None, budget: int,
) -> State:
    """Any module through ``torch.func``: ``vmap(grad)`` over models, and over examples for DP-SGD."""
    template = arch.template()
    params = {k: state[k].clone() for k in template.trainable}
    buffers = {k: state[k].clone() for k in template.buffers}  # BatchNorm's running statistics update in place
    names = list(params)
    optimizer = HeavyBall([params[k] for k in names], [k in template.penalised for k in names], recipe, arch.l2)
    sizes = [params[k][0].numel() for k in names]
    seeds = rng.Keys(train_seeds.to(X.device))
    K, n = X.shape[:2]
    shape = pass_shape(arch, min(recipe.batch_size or n, n), X.dtype, X.device)
    per_call = examples_per_call(arch, min(K, shape.models), budget, X.dtype)
    shapes = [params[k].shape for k in names]
    steps, q = steps_and_rate(n, recipe)
    noise = Noise(seeds, steps, template.n_params, X.dtype, functools.partial(shaped_like, shapes, sizes))
    clip, kept = (0.0 if dp is None else dp.clip), len(names)

    per_model = [params[k] for k in names] + [buffers[k] for k in template.buffers]  # updated in place

    def split(tensors: list[torch.Tensor]) -> tuple[State, State]:  # ``per_model``'s order → (params, buffers)
        return dict(zip(names, tensors[:kept])), dict(zip(template.buffers, tensors[kept:]))

    def clipped(tensors: list[torch.Tensor], Xs: torch.Tensor, ys: torch.Tensor, vs: torch.Tensor | None) -> Layers:
        sums = clipped_sum(arch, *split(tensors), Xs, ys, vs, clip, per_call, scale=1.0 / (q * n))
        return [sums[k] for k in names]

    def mean(tensors: list[torch.Tensor], Xs: torch.Tensor, ys: torch.Tensor, _: torch.Tensor | None) -> Layers:
        g = mean_gradient(arch, *split(tensors), Xs, ys)
        return [g[k] for k in names]

    for t, (Xb, yb, valid) in enumerate(stream(arch, X, y, recipe, seeds, dp)):
        images = Xb.reshape(K, Xb.shape[1], *arch.input_shape)
        if dp is None:
            grads, step_noise = _in_passes(mean, per_model, images, yb, None, shape), None
        else:
            sums = _in_passes(clipped, per_model, images, yb, valid, shape)
            canary = None
            if dp.canaries is not None:
                flat = dp.canaries.contribution(seeds, t, q, template.n_params, dp.clip, X.dtype, X.device)
                canary = shaped_like(shapes, sizes, flat)
            grads, step_noise = sums, noise_of_step(sums, canary, noise, t, dp, q * n)
        optimizer.step(grads, step_noise)
    released = dict(zip(names, optimizer.result()))
    return {k: released[k] if k in released else buffers[k] for k in state}
