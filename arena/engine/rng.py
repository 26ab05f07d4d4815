"""Counter-based random numbers: model k's draws depend only on (seed_k, stream, counter).

Stateless hashing instead of a generator object, so a model gets the same randomness whether
it is trained alone or in a batch of any size, on any device.
"""

import math
from enum import IntEnum

import torch

_MASK = 0xFFFFFFFF
_INDEX_BITS = 24


class Purpose(IntEnum):
    """What a stream of random numbers is used for; the high bits of the stream id."""

    INIT = 1
    SHUFFLE = 2
    POISSON = 3
    NOISE = 4


def stream(purpose: Purpose, index: int = 0) -> int:
    """Stream id for `purpose` at `index` (an epoch or a step); distinct pairs give distinct ids."""
    if not 0 <= index < 1 << _INDEX_BITS:
        raise ValueError(f"stream index {index} outside [0, 2**{_INDEX_BITS})")
    return int(purpose) << _INDEX_BITS | index


def _mul32_(x: torch.Tensor, c: int) -> torch.Tensor:
    """x *= c mod 2**32 in place for 32-bit x in int64, in 16-bit halves so nothing overflows."""
    hi = x * (c >> 16)
    hi.bitwise_and_(0xFFFF).bitwise_left_shift_(16)
    return x.mul_(c & 0xFFFF).add_(hi).bitwise_and_(_MASK)


def _mix_(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 (Wellons) in place: a bijective 32-bit integer hash with good avalanche.

    In place because the hash dominates DP-SGD's per-step cost and fresh tensors triple it.
    """
    x.bitwise_xor_(x >> 16)
    _mul32_(x, 0x7FEB352D)
    x.bitwise_xor_(x >> 15)
    _mul32_(x, 0x846CA68B)
    return x.bitwise_xor_(x >> 16)


def bits(seeds: torch.Tensor, stream_id: int, n: int) -> torch.Tensor:
    """[K, n] 32-bit hashes (in int64) of counters 0..n-1; distinct within a row, no ties."""
    if n > 1 << 32:
        raise ValueError("at most 2**32 draws per stream")
    seeds = seeds.to(torch.int64)
    lo, hi = seeds & _MASK, (seeds >> 32) & _MASK
    key_a = _mix_(_mix_(_mix_(lo ^ 0x9E3779B9) ^ hi) ^ stream_id).unsqueeze(1)
    key_b = _mix_(_mix_(_mix_(lo ^ 0x85EBCA6B) ^ hi) ^ stream_id).unsqueeze(1)
    counters = torch.arange(n, dtype=torch.int64, device=seeds.device)
    return _mix_(_mix_(counters ^ key_a).bitwise_xor_(key_b))


def _shape(shape: int | tuple[int, ...]) -> tuple[int, ...]:
    return (shape,) if isinstance(shape, int) else tuple(shape)


def uniform(
    seeds: torch.Tensor,
    stream_id: int,
    shape: int | tuple[int, ...],
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """[K, *shape] uniforms in the open interval (0, 1), exactly representable in `dtype`."""
    shape = _shape(shape)
    n_bits = min(32, -round(math.log2(torch.finfo(dtype).eps)))
    h = bits(seeds, stream_id, math.prod(shape)) >> (32 - n_bits)
    return ((h.to(dtype) + 0.5) * 2.0**-n_bits).reshape(len(seeds), *shape)


def normal(
    seeds: torch.Tensor,
    stream_id: int,
    shape: int | tuple[int, ...],
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """[K, *shape] standard normals by Box-Muller: counters 2j, 2j+1 give elements 2j and 2j+1."""
    shape = _shape(shape)
    n = math.prod(shape)
    u = uniform(seeds, stream_id, ((n + 1) // 2, 2), dtype)
    radius = torch.sqrt(-2.0 * torch.log(u[..., 0]))
    angle = 2.0 * math.pi * u[..., 1]
    z = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=-1)
    return z.reshape(len(seeds), -1)[:, :n].reshape(len(seeds), *shape)


def bernoulli(
    seeds: torch.Tensor, stream_id: int, shape: int | tuple[int, ...], p: float
) -> torch.Tensor:
    """[K, *shape] booleans, True with probability p (to within 2**-32), independent of dtype."""
    shape = _shape(shape)
    threshold = round(p * 2**32)
    return (bits(seeds, stream_id, math.prod(shape)) < threshold).reshape(len(seeds), *shape)


def permutation(seeds: torch.Tensor, stream_id: int, n: int) -> torch.Tensor:
    """[K, n] independent random permutations of 0..n-1 (argsort of distinct hashes)."""
    return torch.argsort(bits(seeds, stream_id, n), dim=1)
