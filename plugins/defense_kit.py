"""What the plain-PyTorch defenses share: per-model held-out splits, batches that carry each record's row (to look
up soft targets), soft-label cross-entropy, entropy, and K independent small MLPs (the defenders' own membership
classifiers). Every draw is from a model's own seed, so a model trains the same alone or inside any batch."""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator

from arena import FitTask, derive_seed


def fraction(default: float, description: str) -> Any:
    """A pydantic field for a fraction of the training set, strictly between 0 and 1."""
    return Field(default=default, gt=0.0, lt=1.0, allow_inf_nan=False, description=description)


def retired(defense: str, *names: str) -> Any:
    """A before-validator for a defense's Params that accepts and ignores ``names``, the fractions of the members it
    once held out as its reference or validation set, with a ``DeprecationWarning`` (for one release): the reference
    set is now population data the game supplies (``FitTask.reference_X``; the membership game's ``reference``)."""

    def drop(cls: type, data: Any) -> Any:
        if isinstance(data, dict) and (gone := [n for n in names if n in data]):
            warnings.warn(f"{defense}: {', '.join(gone)} no longer applies and is ignored: the defense trains on every "
                          "member and takes its reference data from the game (game.reference); remove it",
                          DeprecationWarning, stacklevel=2)
            data = {k: v for k, v in data.items() if k not in gone}
        return data

    validator: Any = classmethod(drop)
    return model_validator(mode="before")(validator)


def refuse_newton(name: str, task: FitTask) -> None:
    """Gradient-step defenses cannot honour the exact solver."""
    if task.solver == "newton":
        raise ValueError(f"{name} trains by gradient steps; solver 'newton' does not apply")


def steps_per_epoch(task: FitTask) -> int:
    """Optimiser steps in one epoch of ``task.minibatches()``."""
    batch = task.recipe.batch_size
    return 1 if batch is None or batch >= task.n else math.ceil(task.n / batch)


def split(task: FitTask, fraction: float, tag: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per model, its rows cut at random (from its train seed and ``tag``) into (kept [K, n - h], held out [K, h]),
    h = round(fraction · n), at least one row on each side."""
    n = task.n
    held = min(max(1, round(fraction * n)), n - 1)
    perms = []
    for seed in task.train_seeds.tolist():
        g = torch.Generator().manual_seed(derive_seed(int(seed), tag))
        perms.append(torch.randperm(n, generator=g))
    perm = torch.stack(perms).to(task.device)
    return perm[:, held:].sort(dim=1).values, perm[:, :held].sort(dim=1).values


def rows(T: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Rows ``idx`` [K, m] of each model's T [K, n, ...] as [K, m, ...]."""
    index = idx.reshape(*idx.shape, *([1] * (T.ndim - 2))).expand(*idx.shape, *T.shape[2:])
    return T.gather(1, index)


def indexed(task: FitTask, idx: torch.Tensor | None = None, seed_tag: str = "") -> FitTask:
    """``task`` on rows ``idx`` [K, m] of each model's data (all rows when None), with ``y`` replaced by each
    row's position in that subset, so that ``minibatches()`` yields (X, positions, valid) and the defense looks up
    labels and soft targets by position. ``seed_tag`` gives the subset its own batch order."""
    X = task.X if idx is None else rows(task.X, idx)
    K, m = X.shape[:2]
    seeds = task.train_seeds
    if seed_tag:
        seeds = torch.tensor([derive_seed(int(s), seed_tag) for s in seeds.tolist()], dtype=torch.int64,
                             device=seeds.device)
    pos = torch.arange(m, device=task.device).expand(K, m).contiguous()
    return dataclasses.replace(task, X=X, y=pos, train_seeds=seeds)


def soft_cross_entropy(logits: torch.Tensor, target: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """Σ_k of model k's mean over its batch of −Σ_c t_c log p_c, for logits and targets [K, B, C]."""
    per = -(target * F.log_softmax(logits, dim=-1)).sum(-1)
    return masked_mean(per, valid).sum()


def masked_mean(values: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """[K] mean of values [K, B] over each model's valid rows."""
    if valid is None:
        return values.mean(dim=1)
    w = valid.to(values.dtype)
    return (values * w).sum(dim=1) / w.sum(dim=1).clamp_min(1.0)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Shannon entropy (nats) of softmax(logits) over the last axis."""
    log_p = F.log_softmax(logits, dim=-1)
    return -(log_p.exp() * log_p).sum(-1)


def smoothed(y: torch.Tensor, n_classes: int, true_prob: float, dtype: torch.dtype) -> torch.Tensor:
    """Soft labels [.., C]: ``true_prob`` on the true class, the rest spread evenly over the others."""
    onehot = F.one_hot(y, n_classes).to(dtype)
    return onehot * true_prob + (1.0 - onehot) * (1.0 - true_prob) / (n_classes - 1)


class StackedMLP(torch.nn.Module):
    """K independent MLPs (ReLU between layers, one logit out), stacked: maps [K, B, d] to [K, B]. Model k's
    weights are drawn from its own seed (PyTorch's default Linear initialisation)."""

    def __init__(self, seeds: list[int], widths: list[int], dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.weights = torch.nn.ParameterList()
        self.biases = torch.nn.ParameterList()
        for d_in, d_out in zip(widths, [*widths[1:], 1]):
            ws, bs = [], []
            for seed in seeds:
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(seed)
                    layer = torch.nn.Linear(d_in, d_out)
                ws.append(layer.weight.detach().T)
                bs.append(layer.bias.detach())
            self.weights.append(torch.nn.Parameter(torch.stack(ws).to(device, dtype)))
            self.biases.append(torch.nn.Parameter(torch.stack(bs).to(device, dtype)))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            h = torch.baddbmm(b.unsqueeze(1), h, w)
            if i < last:
                h = torch.relu(h)
        return h.squeeze(-1)


def model_seeds(task: FitTask, tag: str) -> list[int]:
    """One seed per model for a defense's auxiliary randomness, from the model's train seed and ``tag``."""
    return [derive_seed(int(s), tag) % 2**63 for s in task.train_seeds.tolist()]


def row_hash(logits: torch.Tensor, buckets: int) -> torch.Tensor:
    """[K, n] a deterministic bucket in [0, buckets) for each output row (its values, rounded to float32)."""
    bits = logits.to(torch.float32).contiguous().view(torch.int32).to(torch.int64)
    weights = torch.arange(1, bits.shape[-1] + 1, dtype=torch.int64, device=bits.device) * 0x9E3779B1
    mixed = (bits * weights).sum(-1)
    mixed = (mixed ^ (mixed >> 29)) * 0x3F58476D1CE4E5B9 & 0x7FFFFFFFFFFFFFFF
    return (mixed ^ (mixed >> 32)) % buckets
