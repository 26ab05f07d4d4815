"""Record digests: a hash of each record alone (its features as float64 and its label), and the cell of a
data-independent partition it falls in (``arena.engine.partition``); the audit's claim check recomputes both from
the records it handed a defense (``arena.engine.instruments``)."""

from __future__ import annotations

import hashlib

import numpy as np
import torch


def record_digests(X: torch.Tensor, y: torch.Tensor) -> list[bytes]:
    """One 16-byte digest per record of X [n, ...], y [n]: its features as float64 and its label as int64, so a
    cast of the data to another float dtype or device keeps each record's digest."""
    xs = X.detach().reshape(X.shape[0], -1).to("cpu", torch.float64).numpy()
    ys = y.detach().reshape(-1).to("cpu", torch.int64).numpy()
    return [hashlib.blake2b(xs[i].tobytes() + ys[i].tobytes(), digest_size=16).digest() for i in range(len(xs))]


def digest_cells(digests: list[bytes], parts: int) -> np.ndarray:
    """[n] the cell in [0, parts) of each record digest."""
    return np.fromiter((int.from_bytes(d[:8], "little") % parts for d in digests), np.int64, len(digests))
