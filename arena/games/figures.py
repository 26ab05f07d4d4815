"""Figure helpers the games share. Their figures are drawn for print through ``arena.results.figures`` (TrueType
fonts, constrained layout, at most three panels a row, one colour per defense of a track), which importing this
module also sets up for the figures a game saves itself (the reconstruction grids)."""

from __future__ import annotations

import numpy as np

from arena.results.figures import figure, text, wrap

__all__ = ["as_image", "figure", "text", "wrap"]


def as_image(record: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A flat record as an [H, W] grey or [H, W, 3] colour image in [0, 1] (channels-first shapes are moved last)."""
    img = np.clip(np.asarray(record, dtype=np.float64).reshape(shape), 0.0, 1.0)
    if img.ndim == 3 and img.shape[0] in (1, 3):
        img = np.moveaxis(img, 0, -1)
    return img[..., 0] if img.ndim == 3 and img.shape[-1] == 1 else img
