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
    kind: Literal["image", "tabular"]
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
