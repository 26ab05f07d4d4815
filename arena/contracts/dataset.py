"""Datasets: the in-memory form every game works on, the loader base class, and seeded splits."""

from __future__ import annotations

import abc
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
from pydantic import BaseModel

from arena.contracts.params import NoParams


@dataclass(frozen=True)
class Dataset:
    """Features scaled to [0, 1] (float32, one row per record), integer labels, and how to draw a record."""

    name: str
    X: np.ndarray
    y: np.ndarray
    n_classes: int
    kind: Literal["image", "tabular", "text"]
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.X.ndim != 2 or len(self.X) != len(self.y):
            raise ValueError(f"dataset {self.name!r}: X must be 2-D with one label per row")

    @property
    def n(self) -> int:
        return len(self.y)

    @property
    def n_features(self) -> int:
        return self.X.shape[1]

    def fingerprint(self) -> str:
        """Content hash of features and labels, part of every cache key that depends on the data."""
        h = hashlib.sha256()
        h.update(np.ascontiguousarray(self.X).tobytes())
        h.update(np.ascontiguousarray(self.y).tobytes())
        return h.hexdigest()[:16]


PAD = -1
"""The token id of padding in a text record (``TextDataset``): no token; a model's loss and scores skip it."""


@dataclass(frozen=True)
class TextDataset(Dataset):
    """Text records as token ids: ``X`` [n, length] holds each record's ids as float32 (exact below 2^24), padded
    with ``PAD`` after its last token; ``y`` is all zeros (a language model predicts the next token, not a label);
    ``n_classes`` is the vocabulary's size. ``tokenizer`` is the ``tokenizers`` JSON that produced the ids (part of
    the model as released: attacks that re-encode text need it), ``source`` [n] the index in ``sources`` of the file
    or corpus each record came from (a split whose members and non-members come from different sources measures
    that shift, not membership)."""

    tokenizer: str = ""
    sources: tuple[str, ...] = ()
    source: np.ndarray | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.source is None or len(self.source) != self.n or not self.sources:
            raise ValueError(f"dataset {self.name!r}: a text dataset names the source of every record")

    def fingerprint(self) -> str:
        """Content hash of the ids, the sources and the tokenizer."""
        h = hashlib.sha256(super().fingerprint().encode())
        h.update(self.tokenizer.encode())
        h.update(np.ascontiguousarray(self.source).tobytes())
        return h.hexdigest()[:16]


class DatasetLoader(abc.ABC):
    """Base class of dataset plugins: a name, a pydantic parameter model and ``load``."""

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    Params: ClassVar[type[BaseModel]] = NoParams

    @abc.abstractmethod
    def load(self, params: BaseModel) -> Dataset:
        """Return the dataset for validated ``params``; raise ``ValueError`` naming a bad file or field."""


def available_memory() -> int:
    """Bytes this machine can still give (MemAvailable on Linux; physical memory elsewhere)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def minmax_scale(X: np.ndarray) -> np.ndarray:
    """Scale each column to [0, 1] over the whole dataset (split-independent, so deterministic)."""
    X = X.astype(np.float64)
    lo, hi = X.min(axis=0), X.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    return ((X - lo) / span).astype(np.float32)
