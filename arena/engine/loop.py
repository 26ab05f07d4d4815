"""The loop engine: K models trained one at a time, each module run as written in train mode (dropout on,
BatchNorm on batch statistics and updating its running statistics) with ordinary autograd.

It trains what the batched engine cannot reproduce per model (``architecture.loop_reason``: a module that draws
random numbers in training, such as dropout). Everything else is the batched engine's, per model: the recipe's
optimiser (``trainer.HeavyBall``: momentum SGD, ``l2`` as weight decay on the weights, the moving average of
``ema``), its batches (the per-model shuffle, or DP-SGD's Poisson samples, and the augmentation, from the counter
RNG keyed by the model's train seed), DP-SGD's clipping, canaries and noise. What the module draws itself comes from
torch's generator seeded by ``module_seed`` of the model's train seed alone, so a model trains identically alone or
beside any others, in any position.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from arena.engine import rng
from arena.engine.architecture import Architecture, State
from arena.engine.batching import steps_and_rate
from arena.engine.recipe import DPNoise, Recipe
from arena.engine.seeds import module_seed, seeded
from arena.engine.stepping import MEMORY_BUDGET, HeavyBall, Noise, _step_noise, _stream, shaped_like


def train(
    arch: Architecture, X: torch.Tensor, y: torch.Tensor, recipe: Recipe, state: State, train_seeds: torch.Tensor,
    dp: DPNoise | None = None, budget: int = MEMORY_BUDGET,
) -> State:
    """Train K models on X [K, n, d], y [K, n] from ``state`` (left unmodified), one at a time; the same loss and
    update as ``trainer.train`` (mean cross-entropy, heavy-ball momentum; DP-SGD with ``dp``)."""
    parts = []
    for k in range(X.shape[0]):
        sl = slice(k, k + 1)
        with seeded(module_seed(int(train_seeds[k])), X.device):
            parts.append(_train_one(arch, X[sl], y[sl], recipe, {n: v[sl] for n, v in state.items()},
                                    train_seeds[sl], None if dp is None else dp.rows(sl), budget))
    return {n: torch.cat([p[n] for p in parts]) for n in state}


def _train_one(
    arch: Architecture, X: torch.Tensor, y: torch.Tensor, recipe: Recipe, state: State, train_seeds: torch.Tensor,
    dp: DPNoise | None, budget: int,
) -> State:
    """One model (a leading axis of 1 on every tensor, as the batched engine keeps it)."""
    template = arch.template()
    module = template.train_module
    names = list(template.trainable)
    with torch.no_grad():
        params = [state[k].clone() for k in names]
        buffers = {k: state[k].clone() for k in template.buffers}  # updated in place (BatchNorm's statistics)
        optimizer = HeavyBall(params, [k in template.penalised for k in names], recipe, arch.l2)
    sizes, shapes = [p[0].numel() for p in params], [p.shape for p in params]
    seeds = rng.Keys(train_seeds.to(X.device))
    n = X.shape[1]
    steps, q = steps_and_rate(n, recipe)
    noise = Noise(seeds, steps, template.n_params, X.dtype, functools.partial(shaped_like, shapes, sizes))
    one_buffers = {k: v[0] for k, v in buffers.items()}  # views: the module's updates land in ``buffers``

    def loss(ps: list[torch.Tensor], x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(module, ({**dict(zip(names, ps)), **one_buffers}), (x,)), t)

    per_call = max(1, budget // max(1, 8 * template.n_params))
    per_example = vmap(grad(lambda ps, x, t: loss(ps, x.unsqueeze(0), t.unsqueeze(0))), in_dims=(None, 0, 0),
                       randomness="different")  # each example its own dropout mask, as in a batch

    for step, (Xb, yb, valid) in enumerate(_stream(arch, X, y, recipe, seeds, dp)):
        images = Xb[0].reshape(Xb.shape[1], *arch.input_shape)
        if dp is None:
            ps = [p[0].detach().requires_grad_() for p in optimizer.params]
            grads = [g.unsqueeze(0) for g in torch.autograd.grad(loss(ps, images, yb[0]), ps)]
            step_noise = None
        else:
            sums = [torch.zeros_like(p) for p in optimizer.params]
            ps = [p[0] for p in optimizer.params]
            for start in range(0, images.shape[0], per_call):
                sl = slice(start, start + per_call)
                g = per_example(ps, images[sl], yb[0, sl])
                sq = sum(t.reshape(t.shape[0], -1).square().sum(-1) for t in g)
                factor = (dp.clip / (q * n) / sq.sqrt()).clamp(max=1.0 / (q * n))
                if valid is not None:
                    factor = factor * valid[0, sl].to(factor.dtype)
                for total, t in zip(sums, g):
                    total[0] += torch.einsum("b,b...->...", factor, t)
            canary = None
            if dp.canaries is not None:
                flat = dp.canaries.contribution(seeds, step, q, template.n_params, dp.clip, X.dtype, X.device)
                canary = shaped_like(shapes, sizes, flat)
            grads, step_noise = sums, _step_noise(sums, canary, noise, step, dp, q * n)
        with torch.no_grad():
            optimizer.step(grads, step_noise)
    released = dict(zip(names, optimizer.result()))
    return {k: released[k] if k in released else buffers[k] for k in state}


UserFit = Callable[..., torch.nn.Module | None]
"""A user's training function ``fit(model, X, y, seed) -> model`` (plain PyTorch)."""


def train_user(
    arch: Architecture, X: torch.Tensor, y: torch.Tensor, state: State, train_seeds: torch.Tensor, fit: UserFit,
    **extra: object,
) -> State:
    """Train K models on X [K, n, d], y [K, n] one at a time with a user's function: model k is a fresh module of
    ``arch`` holding row k of ``state`` (the arena's seeded initialisation), in train mode on X's device, and
    ``fit(module, X[k] as [n, *input_shape], y[k], seed)`` trains it as its author trains it (their optimiser,
    scheduler, augmentation, mixed precision), ``seed`` the model's train seed; ``extra`` keywords go to ``fit``
    too. Torch's generator is seeded by ``module_seed`` of the seed first, so a function that draws without
    seeding is still reproducible. Returns the trained tensors, stacked (``ValueError`` when ``fit`` returns
    something else than a module of the same tensor names and shapes)."""
    parts = []
    for k in range(X.shape[0]):
        seed = int(train_seeds[k])
        with torch.random.fork_rng(devices=[]):
            module = arch.build()
        module = module.to(X.device)
        with torch.no_grad():
            for name, t in [*module.named_parameters(), *module.named_buffers()]:
                if name in state:
                    t.copy_(state[name][k].to(t.dtype))
        module.train()
        images = X[k].reshape(X.shape[1], *arch.input_shape)
        with seeded(module_seed(seed), X.device):
            out = fit(module, images, y[k], seed, **extra)
        trained = module if out is None else out
        if not isinstance(trained, torch.nn.Module):
            raise ValueError(f"the user's fit returned a {type(trained).__name__}, not the torch.nn.Module it trained")
        tensors = {n: t.detach() for n, t in [*trained.named_parameters(), *trained.named_buffers()]}
        missing = [n for n in state if n not in tensors or tensors[n].shape != state[n].shape[1:]]
        if missing:
            raise ValueError(f"the user's fit returned a module without the model's tensors {', '.join(missing[:5])} "
                             "(or with other shapes): return the module it was given, trained")
        parts.append({n: tensors[n].to(state[n].device, state[n].dtype) for n in state})
    return {n: torch.stack([p[n] for p in parts]) for n in state}
