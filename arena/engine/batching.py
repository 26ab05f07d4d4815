"""The batches of one training run, per model from its own seeds: full batch, a shuffle cut into batches, or
DP-SGD's Poisson samples, optionally augmented."""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

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

def tail_split(valid: torch.Tensor | None, saving: float = 0.1) -> tuple[int, torch.Tensor] | None:
    """Where to cut a step's padded Poisson batch (``valid`` [K, B], each model's rows first): the rows past the
    cut then go through a second pass with only the models that have any, (cut, their indices). The cut m
    minimises the rows computed, K·m + #{count > m}·(B − m); None unless that saves ``saving`` of the K·B rows."""
    if valid is None or valid.shape[0] < 2:
        return None
    K, B = valid.shape
    counts = sorted(valid.sum(1).tolist())
    best, cut = K * B, B
    for i, m in enumerate(counts):
        tail = K - i - counts[i:].count(m)  # models with more than m rows
        if m < B and K * m + tail * (B - m) < best:
            best, cut = K * m + tail * (B - m), m
    if best > (1 - saving) * K * B:
        return None
    return cut, (valid[:, cut:].any(1)).nonzero().squeeze(1)


Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]
"""One step's inputs [K, B, d], labels [K, B] and validity mask [K, B] (None: every row is real)."""


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
