"""Training-time augmentation of image batches: random crop after zero padding, and horizontal flip.

Each model draws its own crops and flips from its train seed (counter RNG, one stream per step, one counter
block per position in its batch), so a model sees the same augmented batches alone or inside any batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from arena.contracts.recipe import Augment
from arena.engine import rng


def augment(images: torch.Tensor, aug: Augment, seeds: rng.Seeds, step: int) -> torch.Tensor:
    """Augmented copy of ``images`` [K, B, C, H, W]; model k's draws come from its seed and ``step`` alone."""
    K, B, C, H, W = images.shape
    u = rng.uniform(seeds, rng.stream(rng.Purpose.AUGMENT, step), (B, 3), torch.float64).to(images.device)
    out = images
    if aug.crop > 0:
        p = aug.crop
        padded = F.pad(images.reshape(K * B, C, H, W), (p, p, p, p)).reshape(K, B, C, H + 2 * p, W + 2 * p)
        dy = (u[..., 0] * (2 * p + 1)).long().clamp(max=2 * p)  # [K, B] offsets in 0..2p
        dx = (u[..., 1] * (2 * p + 1)).long().clamp(max=2 * p)
        rows = (dy.unsqueeze(-1) + torch.arange(H, device=images.device))  # [K, B, H]
        cols = (dx.unsqueeze(-1) + torch.arange(W, device=images.device))  # [K, B, W]
        k = torch.arange(K, device=images.device).view(K, 1, 1, 1, 1)
        b = torch.arange(B, device=images.device).view(1, B, 1, 1, 1)
        c = torch.arange(C, device=images.device).view(1, 1, C, 1, 1)
        out = padded[k, b, c, rows.view(K, B, 1, H, 1), cols.view(K, B, 1, 1, W)]
    if aug.flip:
        mirror = (u[..., 2] < 0.5).view(K, B, 1, 1, 1)
        out = torch.where(mirror, out.flip(-1), out)
    return out
