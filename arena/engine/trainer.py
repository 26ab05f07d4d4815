"""Train K softmax classifiers at once with momentum SGD or DP-SGD, all batched over models.

Every model's randomness (shuffles, Poisson samples, noise) comes from its own train seed through
the counter RNG, so a model trains identically alone or inside any batch.
"""

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from arena.engine import rng
from arena.engine.dpsgd import clipped_noisy_gradient
from arena.models import (
    Architecture,
    Params,
    backprop,
    init_params,
    layer_inputs,
    output_delta,
    sum_gradients,
    unflatten,
)


@dataclass(frozen=True)
class Recipe:
    """Optimiser schedule; `batch_size=None` means full-batch gradient descent."""

    epochs: int
    lr: float
    momentum: float = 0.0
    batch_size: int | None = None

    def __post_init__(self) -> None:
        if self.epochs < 0 or self.lr <= 0 or not 0 <= self.momentum < 1:
            raise ValueError("need epochs >= 0, lr > 0 and 0 <= momentum < 1")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError("batch_size must be positive or None")


@dataclass(frozen=True)
class DPNoise:
    """DP-SGD settings: per-example clipping norm C and noise std / C."""

    clip: float
    noise_multiplier: float

    def __post_init__(self) -> None:
        if self.clip <= 0 or self.noise_multiplier < 0:
            raise ValueError("need clip > 0 and noise_multiplier >= 0")


def steps_and_rate(n: int, recipe: Recipe) -> tuple[int, float]:
    """(optimizer steps, sampling rate q) that `train` uses on n points; q = 1 for full batch.

    The same schedule serves both modes: DP-SGD samples each point with probability q = B/n
    per step, non-private SGD walks through a fresh shuffle in batches of B.
    """
    if recipe.batch_size is None or recipe.batch_size >= n:
        return recipe.epochs, 1.0
    return recipe.epochs * math.ceil(n / recipe.batch_size), recipe.batch_size / n


def _take(X: torch.Tensor, y: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows idx [K, m] of each model's data as ([K, m, d], [K, m]); index_select is fastest."""
    (K, n, d), m = X.shape, idx.shape[1]
    flat = (idx + n * torch.arange(K, device=idx.device).unsqueeze(1)).reshape(-1)
    Xb = X.reshape(K * n, d).index_select(0, flat).reshape(K, m, d)
    return Xb, y.reshape(-1).index_select(0, flat).reshape(K, m)


def _poisson_batch(
    X: torch.Tensor, y: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each model's sampled points, padded to the largest count, with a validity mask [K, m]."""
    counts = mask.sum(dim=1)
    m = int(counts.max())
    idx = torch.argsort(mask.to(torch.int8), dim=1, descending=True, stable=True)[:, :m]
    valid = torch.arange(m, device=X.device) < counts.unsqueeze(1)
    return *_take(X, y, idx), valid


def _batches(
    X: torch.Tensor, y: torch.Tensor, recipe: Recipe, seeds: rng.Keys
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Non-private batches: the whole set, or a fresh per-model shuffle each epoch cut into B."""
    n = X.shape[1]
    for epoch in range(recipe.epochs):
        if recipe.batch_size is None or recipe.batch_size >= n:
            yield X, y
            continue
        perm = rng.permutation(seeds, rng.stream(rng.Purpose.SHUFFLE, epoch), n)
        for start in range(0, n, recipe.batch_size):
            yield _take(X, y, perm[:, start : start + recipe.batch_size])


def _sgd_gradients(
    arch: Architecture,
    params: Params,
    X: torch.Tensor,
    y: torch.Tensor,
    recipe: Recipe,
    seeds: rng.Keys,
) -> Iterator[Params]:
    """Mean cross-entropy gradient of each non-private batch, at `params` as updated in place."""
    for Xb, yb in _batches(X, y, recipe, seeds):
        inputs, logits = layer_inputs(arch, params, Xb)
        deltas = backprop(arch, params, inputs, output_delta(logits, yb) / Xb.shape[1])
        yield sum_gradients(inputs, deltas)


def _dp_gradients(
    arch: Architecture,
    params: Params,
    X: torch.Tensor,
    y: torch.Tensor,
    recipe: Recipe,
    seeds: rng.Keys,
    dp: DPNoise,
) -> Iterator[Params]:
    """Clipped, noised, Poisson-sampled gradient of each DP-SGD step, at `params` as updated."""
    n = X.shape[1]
    steps, q = steps_and_rate(n, recipe)
    for t in range(steps):
        if q < 1.0:
            mask = rng.bernoulli(seeds, rng.stream(rng.Purpose.POISSON, t), n, q)
            Xb, yb, valid = _poisson_batch(X, y, mask)
        else:
            Xb, yb, valid = X, y, None
        inputs, logits = layer_inputs(arch, params, Xb)
        dlogits = output_delta(logits, yb)
        if valid is not None:
            dlogits = dlogits * valid.unsqueeze(-1)
        deltas = backprop(arch, params, inputs, dlogits)
        z = rng.normal(seeds, rng.stream(rng.Purpose.NOISE, t), arch.n_params, X.dtype)
        yield clipped_noisy_gradient(
            inputs, deltas, dp.clip, dp.noise_multiplier, unflatten(arch, z), q * n
        )


def train(
    arch: Architecture,
    X: torch.Tensor,
    y: torch.Tensor,
    recipe: Recipe,
    init_seeds: torch.Tensor,
    train_seeds: torch.Tensor,
    dp: DPNoise | None = None,
    params: Params | None = None,
) -> Params:
    """Train K models on X [K,n,d], y [K,n]; loss = mean CE + (l2/2)||W||^2, heavy-ball momentum.

    Starts from `params` if given (left unmodified), else `init_seeds`; follows X's dtype/device.
    """
    K, n, d = X.shape
    if y.shape != (K, n) or init_seeds.shape != (K,) or train_seeds.shape != (K,):
        raise ValueError(f"need y [K,n] and seeds [K] for X of shape {tuple(X.shape)}")
    if d != arch.in_dim:
        raise ValueError(f"X has {d} features, architecture expects {arch.in_dim}")
    if params is None:
        params = init_params(arch, init_seeds, X.dtype, X.device)
    params = [p.detach().clone() for p in params]
    X, y = X.contiguous(), y.contiguous()  # once, so batch gathers never copy the whole set
    seeds = rng.Keys(train_seeds.to(X.device))  # derived once, not once per step's draws
    if dp is None:
        gradients = _sgd_gradients(arch, params, X, y, recipe, seeds)
    else:
        gradients = _dp_gradients(arch, params, X, y, recipe, seeds, dp)
    velocity = [torch.zeros_like(p) for p in params]
    for grads in gradients:
        for i, (p, g, v) in enumerate(zip(params, grads, velocity)):
            if i % 2 == 0 and arch.l2:
                g = g + arch.l2 * p
            v.mul_(recipe.momentum).add_(g)
            p.sub_(recipe.lr * v)
    return params
