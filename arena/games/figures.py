"""Figure helpers the games share (their report sections draw with matplotlib's Agg canvas, no pyplot)."""

from __future__ import annotations

import numpy as np


def text(s: object) -> str:
    """A plugin-supplied string made literal for matplotlib (a '$' would otherwise start mathtext)."""
    return str(s).replace("\\", "\\\\").replace("$", r"\$")


def as_image(record: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A flat record as an [H, W] grey or [H, W, 3] colour image in [0, 1] (channels-first shapes are moved last)."""
    img = np.clip(np.asarray(record, dtype=np.float64).reshape(shape), 0.0, 1.0)
    if img.ndim == 3 and img.shape[0] in (1, 3):
        img = np.moveaxis(img, 0, -1)
    return img[..., 0] if img.ndim == 3 and img.shape[-1] == 1 else img
