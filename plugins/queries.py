"""Augmented queries for membership attacks: the same record mirrored and shifted, as Carlini et al. (2022) query
the target and every shadow model; a model trained with augmentation is more confident on all views of a member."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def shifted(images: torch.Tensor, dy: int, dx: int) -> torch.Tensor:
    """[n, C, H, W] moved by (dy, dx) pixels, the uncovered border filled with zeros (as a padded crop does)."""
    n, c, h, w = images.shape
    p = max(abs(dy), abs(dx))
    if p == 0:
        return images
    padded = F.pad(images, (p, p, p, p))
    return padded[:, :, p - dy : p - dy + h, p - dx : p - dx + w]


def augmented_queries(X: torch.Tensor, input_shape: tuple[int, ...], mirror: bool, shift: int) -> list[torch.Tensor]:
    """Flat records X [n, d] under each query augmentation, identity first: with ``mirror`` the left-right mirror,
    with ``shift`` > 0 the four shifts by ``shift`` pixels (each also mirrored when ``mirror``). Records that are
    not images (``input_shape`` not (C, H, W)) have the identity only."""
    if len(input_shape) != 3 or (not mirror and shift == 0):
        return [X]
    images = X.reshape(len(X), *input_shape)
    bases = [images, images.flip(-1)] if mirror else [images]
    moves = [(0, 0)] + ([(shift, 0), (-shift, 0), (0, shift), (0, -shift)] if shift else [])
    return [shifted(b, dy, dx).reshape(len(X), -1) for dy, dx in moves for b in bases]
