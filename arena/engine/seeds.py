"""Seed derivation, once: every seed in the arena (per model, per matchup, per split, per resampling, the
challenger's) is ``derive_seed`` of named parts, a hash, so it is stable across processes and machines and depends
on nothing else. The named seeds below are that one primitive with their parts fixed."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


def derive_seed(*parts: object) -> int:
    """A 63-bit seed derived from the given parts alone (stable across processes and machines)."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def permutation(n: int, *parts: object) -> np.ndarray:
    """A permutation of range(n) that depends only on the seed parts."""
    return np.random.default_rng(derive_seed(*parts)).permutation(n)


def challenger_seed(secret: bytes, scenario_seed: int) -> int:
    """The seed of the challenger's randomness (splits, challenge order, targets, hidden initialisations) for one
    scenario seed: keyed by the run's secret, so that nothing an attack sees (its view's seeds, the pool seed, the
    data) lets it be rebuilt, while the run directory reproduces it."""
    return derive_seed("challenger", secret.hex(), int(scenario_seed))


def split_seed(key: str) -> int:
    """The seed of a matchup's selection/evaluation split in the DP audit: fixed by its key, independent of its
    scores."""
    return derive_seed("audit-split", key)


RESAMPLES = 1000
"""Bootstrap draws of each metric of a matchup: drawn once when it is scored (``arena.pipeline.execute``) and read
back by the leaderboard."""


def resample_seed(key: str, seed: int = 0) -> int:
    """The seed of a matchup's bootstrap resamples on the leaderboard: fixed by its key (and the board's ``seed``),
    not by the order of work."""
    return derive_seed("resample", seed, key)


def module_seed(train_seed: int, *parts: object) -> int:
    """The seed of torch's generator while the model of ``train_seed`` trains (``parts``: which of its calls): what
    its module draws itself (dropout), from that model's seed alone."""
    return derive_seed("module-randomness", int(train_seed), *parts)


@contextmanager
def seeded(seed: int, device: torch.device) -> Iterator[None]:
    """Torch's generator (the CPU's, and ``device``'s when it is an accelerator) seeded with ``seed`` inside, and
    restored after."""
    import torch  # here: the store and the leaderboard read this module's seeds without torch

    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.default_generator.manual_seed(seed % 2**64)
        if devices:
            torch.cuda.manual_seed(seed % 2**64)
        yield
