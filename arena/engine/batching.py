"""The batches of one training run, per model from its own seeds: full batch, a shuffle cut into batches, or
DP-SGD's Poisson samples, optionally augmented."""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from arena.contracts.architecture import Batch
from arena.engine import rng
from arena.engine.architecture import Architecture
from arena.engine.augment import Augment, augment
from arena.engine.recipe import Recipe


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
    X: torch.Tensor, y: torch.Tensor, idx: torch.Tensor, counts: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Each model's sampled points (``rng.sampled_rows``: idx [K, n], counts [K]) in ascending order, padded to the
    largest count with copies of record 0, and a validity mask [K, m] (None for one model alone, which has no
    padding)."""
    m = int(counts.max())
    if idx.shape[0] == 1:
        return *_take(X, y, idx[:, :m]), None
    valid = torch.arange(m, device=X.device) < counts.unsqueeze(1)
    return *_take(X, y, idx[:, :m]), valid


MASK_BLOCK = 1 << 18
"""Poisson draws (steps × models × records) made in one call: at K = 1 a step's draw is mostly fixed cost."""

Pass = tuple[slice | torch.Tensor, int]
"""One pass of a step: its models (a slice, or their indices) and the rows it takes of each (its largest count)."""


def model_passes(valid: torch.Tensor | None, K: int, B: int, per_pass: int, pass_rows: float) -> list[Pass]:
    """How a step's K models (B rows each, or ``valid`` [K, B]'s counts, each model's rows first) go through the
    layers in passes of at most ``per_pass`` models, each padded to its largest count. Without a mask: consecutive
    slices of equal size. With one: the models sorted by count and cut where Σ (models · rows + ``pass_rows``) is
    least (dynamic programming over the sorted counts, K · per_pass steps), so that models of like counts share a
    pass and Poisson padding costs ~5 % of the rows at K = 64 instead of ~30 % (one pass) or ~12 % (one cut)."""
    if valid is None or K == 1:
        count = -(-K // per_pass)  # the fewest passes; equal shares of them hold at most per_pass
        bounds = [K * i // count for i in range(count + 1)]
        return [(slice(a, b), B) for a, b in zip(bounds[:-1], bounds[1:])]
    counts = valid.sum(1)
    order = torch.argsort(counts, stable=True)
    c = counts[order].tolist()
    cost, back = [0.0] + [math.inf] * K, [0] * (K + 1)
    for i in range(1, K + 1):
        for s in range(max(0, i - per_pass), i):
            total = cost[s] + (i - s) * c[i - 1] + pass_rows
            if total < cost[i]:
                cost[i], back[i] = total, s
    passes: list[Pass] = []
    i = K
    while i > 0:
        passes.append((order[back[i] : i], c[i - 1]))
        i = back[i]
    return passes[::-1]


def batches(X: torch.Tensor, y: torch.Tensor, recipe: Recipe, seeds: rng.Keys) -> Iterator[Batch]:
    """Non-private batches: the whole set, or a fresh per-model shuffle each epoch cut into B."""
    n = X.shape[1]
    for epoch in range(recipe.epochs):
        if recipe.batch_size is None or recipe.batch_size >= n:
            yield X, y, None
            continue
        perm = rng.permutation(seeds, rng.stream(rng.Purpose.SHUFFLE, epoch), n)
        for start in range(0, n, recipe.batch_size):
            yield *_take(X, y, perm[:, start : start + recipe.batch_size]), None


def poisson_batches(
    X: torch.Tensor, y: torch.Tensor, recipe: Recipe, seeds: rng.Keys, present: torch.Tensor | None = None
) -> Iterator[Batch]:
    """DP-SGD's batches: each point in with probability q at every step, independently (or all of them, q = 1);
    rows where ``present`` [K, n] is False never (the draws of the other rows are unchanged)."""
    K, n = X.shape[:2]
    steps, q = steps_and_rate(n, recipe)
    if q >= 1.0:
        for _ in range(steps):
            yield X, y, present
        return
    block = max(1, min(steps, MASK_BLOCK // max(1, K * n)))
    for first in range(0, steps, block):
        ids = [rng.stream(rng.Purpose.POISSON, t) for t in range(first, min(steps, first + block))]
        idx, counts = rng.sampled_rows(seeds, ids, n, q, present)  # several steps in one draw, each as drawn alone
        for step in range(len(ids)):
            yield _poisson_batch(X, y, idx[step], counts[step])


def augmented(
    stream: Iterator[Batch], arch: Architecture, aug: Augment, seeds: rng.Keys
) -> Iterator[Batch]:
    """``stream`` with each batch's images augmented (model k's draws from its seed and the step alone)."""
    for t, (Xb, yb, valid) in enumerate(stream):
        K, B, d = Xb.shape
        if aug.active and len(arch.input_shape) == 3:
            Xb = augment(Xb.reshape(K, B, *arch.input_shape), aug, seeds, t).reshape(K, B, d)
        yield Xb, yb, valid
