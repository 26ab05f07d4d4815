"""Seed derivation, once: every seed in the arena (per model, per matchup, per split) is a hash of named parts, so
it is stable across processes and machines and depends on nothing else."""

from __future__ import annotations

import hashlib

import numpy as np


def derive_seed(*parts: object) -> int:
    """A 63-bit seed derived from the given parts alone (stable across processes and machines)."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def permutation(n: int, *parts: object) -> np.ndarray:
    """A permutation of range(n) that depends only on the seed parts."""
    return np.random.default_rng(derive_seed(*parts)).permutation(n)
