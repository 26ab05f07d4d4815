"""The Laplace mechanism: f(D) + Lap(b) per coordinate with b = Δ₁/ε gives pure ε-DP.

Noise is drawn from the counter RNG (inverse CDF of one uniform per coordinate), so model k's noise
depends only on its seed and the stream, as everywhere else in the engine.
"""

import math

import torch

from arena.engine import instruments, rng


def laplace_scale(l1_sensitivity: float, epsilon: float) -> float:
    """b = Δ₁/ε: the scale at which adding Lap(b) to each coordinate of f is ε-DP (Δ₁ = L1 sensitivity of f)."""
    if not l1_sensitivity > 0 or not epsilon > 0 or math.isinf(l1_sensitivity):
        raise ValueError(f"need a finite sensitivity > 0 and epsilon > 0, got {l1_sensitivity} and {epsilon}")
    return l1_sensitivity / epsilon


def l1_from_l2(l2_sensitivity: float, dimension: int) -> float:
    """Bound on the L1 sensitivity from an L2 one in ``dimension`` coordinates: ||v||₁ <= sqrt(dim) ||v||₂."""
    if dimension < 1:
        raise ValueError("dimension must be positive")
    return math.sqrt(dimension) * l2_sensitivity


def laplace(
    seeds: torch.Tensor,
    stream_id: int,
    shape: int | tuple[int, ...],
    scale: float,
    dtype: torch.dtype = torch.float64,
    *,
    l1_sensitivity: float | None = None,
) -> torch.Tensor:
    """[K, *shape] independent Lap(scale) draws (density exp(-|x|/scale) / (2 scale)), row k from seeds[k].

    ``l1_sensitivity``: the Δ₁ the noise is calibrated to, which an enclosing audit's claim check composes (as
    ε₀ = Δ₁/scale) with the defense's other mechanisms; a draw without it is reported as unaccounted.

    Inverse CDF: with u uniform in (0, 1), x = -scale * sign(u - 1/2) * log(1 - 2|u - 1/2|); the uniforms
    never reach 0 or 1, so every draw is finite.
    """
    if scale < 0:
        raise ValueError("scale must be non-negative")
    instruments.record_laplace(scale, l1_sensitivity)
    centred = rng.uniform(seeds, stream_id, shape, dtype) - 0.5
    return -scale * torch.sign(centred) * torch.log1p(-2.0 * centred.abs())
