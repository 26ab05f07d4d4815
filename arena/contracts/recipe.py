"""What a training run is asked to do, as plain data the contracts, the pipeline and the engine share: the
optimiser schedule (``Recipe``), its augmentation (``Augment``) and DP-SGD's clipping and noise (``DPNoise``).
The engine reads them; how it trains is behind ``arena.contracts.engine.TrainingEngine``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Augment:
    """``crop``: pad each side by this many pixels and cut a random window of the original size (0: off);
    ``flip``: mirror left-right with probability ½."""

    crop: int = 0
    flip: bool = False

    def __post_init__(self) -> None:
        if self.crop < 0:
            raise ValueError("crop padding must be non-negative")

    @property
    def active(self) -> bool:
        return self.crop > 0 or self.flip


@dataclass(frozen=True)
class Recipe:
    """Optimiser schedule; `batch_size=None` means full-batch gradient descent."""

    epochs: int
    lr: float
    momentum: float = 0.0
    batch_size: int | None = None
    augment: Augment = field(default_factory=Augment)
    ema: float = 0.0
    """Decay of an exponential moving average of the iterates, released instead of the last one (0: off). Free
    under DP (post-processing) and a large utility gain for DP-SGD (De et al. 2022)."""

    def __post_init__(self) -> None:
        if self.epochs < 0 or not 0 < self.lr < math.inf or not 0 <= self.momentum < 1:
            raise ValueError("need epochs >= 0, 0 < lr < inf and 0 <= momentum < 1")
        if not 0 <= self.ema < 1:
            raise ValueError("need 0 <= ema < 1")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError("batch_size must be positive or None")


@dataclass(frozen=True)
class DPNoise:
    """DP-SGD settings: per-example clipping norm C and noise std / C.

    An audit may add ``canaries`` (white-box gradient canaries, ``arena.engine.instruments.GradientCanaries``: the
    engine's instrument, opaque here) and ``present`` [K, n] (a bool tensor: row i of model k's data exists only
    where True; an absent row is never sampled, so input canaries are in or out under add/remove while every model
    keeps the tensor shape and the public expected batch size q·n)."""

    clip: float
    noise_multiplier: float
    canaries: Any = field(default=None, compare=False, repr=False)
    present: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.clip <= 0 or self.noise_multiplier < 0:
            raise ValueError("need clip > 0 and noise_multiplier >= 0")

    def rows(self, sl: slice) -> DPNoise:
        """These settings for models ``sl`` of the batch."""
        if self.canaries is None and self.present is None:
            return self
        return DPNoise(self.clip, self.noise_multiplier, self.canaries.rows(sl) if self.canaries is not None else None,
                       self.present[sl] if self.present is not None else None)
