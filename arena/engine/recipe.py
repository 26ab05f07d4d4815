"""What a ``train`` call is asked to do: the optimiser schedule (``Recipe``) and DP-SGD's clipping and noise
(``DPNoise``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from arena.engine.augment import Augment
from arena.engine.instruments import GradientCanaries


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

    An audit may add ``canaries`` (white-box gradient canaries, see ``GradientCanaries``) and ``present`` [K, n]
    (row i of model k's data exists only where True; an absent row is never sampled, so input canaries are in or
    out under add/remove while every model keeps the tensor shape and the public expected batch size q·n)."""

    clip: float
    noise_multiplier: float
    canaries: GradientCanaries | None = field(default=None, compare=False, repr=False)
    present: torch.Tensor | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.clip <= 0 or self.noise_multiplier < 0:
            raise ValueError("need clip > 0 and noise_multiplier >= 0")

    def rows(self, sl: slice) -> DPNoise:
        """These settings for models ``sl`` of the batch."""
        if self.canaries is None and self.present is None:
            return self
        return DPNoise(self.clip, self.noise_multiplier, self.canaries.rows(sl) if self.canaries is not None else None,
                       self.present[sl] if self.present is not None else None)
