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
    AUGMENT = 5


def stream(purpose: Purpose, index: int = 0) -> int:
    """Stream id for `purpose` at `index` (an epoch or a step); distinct pairs give distinct ids."""
    if not 0 <= index < 1 << _INDEX_BITS:
        raise ValueError(f"stream index {index} outside [0, 2**{_INDEX_BITS})")
    return int(purpose) << _INDEX_BITS | index


def _i32(word: int) -> int:
    """The int32 value whose bits are the unsigned 32-bit `word`."""
    return word - (1 << 32) if word >= 1 << 31 else word


_C1, _C2 = _i32(0x7FEB352D), _i32(0x846CA68B)


def _mix_(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 (Wellons) in place: a bijective 32-bit integer hash with good avalanche.

    `x` is int32 storage read as unsigned 32-bit words. Products rely on int32 multiplication wrapping
    mod 2**32 (two's complement, as torch's vectorised and scalar kernels do; the bit-exact reference
    test would catch a backend that did not); right shifts are masked to be logical. 32-bit words and
    in-place ops because the hash dominates DP-SGD's per-step cost (one noise draw per parameter).
    """
    x.bitwise_xor_((x >> 16).bitwise_and_(0xFFFF))
    x.mul_(_C1)
    x.bitwise_xor_((x >> 15).bitwise_and_(0x1FFFF))
    x.mul_(_C2)
    return x.bitwise_xor_((x >> 16).bitwise_and_(0xFFFF))


def _words(values: torch.Tensor) -> torch.Tensor:
    """int64 values in [0, 2**32) as int32 storage holding the same 32-bit words."""
    return values.to(torch.uint32).view(torch.int32)


class Keys:
    """Model seeds prepared for drawing: the stream-independent part of each model's two hash keys, derived once.

    Every function here takes raw int64 seeds [K] or Keys. A loop drawing from a new stream every step (the
    trainer) passes Keys, so that each draw only mixes in its stream id: at K=1 the key derivation, a few dozen
    tiny tensor operations, is a large part of a draw's cost.
    """

    def __init__(self, seeds: torch.Tensor) -> None:
        seeds = seeds.to(torch.int64)
        lo, hi = _words(seeds & _MASK), _words((seeds >> 32) & _MASK)
        salts = _words(torch.tensor([[0x9E3779B9], [0x85EBCA6B]], device=seeds.device))
        self.words = _mix_(_mix_(lo ^ salts) ^ hi)  # [2, K]

    def __len__(self) -> int:
        return self.words.shape[1]


Seeds = torch.Tensor | Keys


def _bits32(seeds: Seeds, stream_id: int, n: int) -> torch.Tensor:
    """[K, n] hashes of counters 0..n-1 as int32 storage of unsigned 32-bit words (see `bits`)."""
    if n > 1 << 31:
        raise ValueError("at most 2**31 draws per stream")
    words = (seeds if isinstance(seeds, Keys) else Keys(seeds)).words
    keys = _mix_(words ^ stream_id).unsqueeze(-1)  # [2, K, 1]
    counters = torch.arange(n, dtype=torch.int32, device=words.device)
    return _mix_(_mix_(counters ^ keys[0]).bitwise_xor_(keys[1]))


def bits(seeds: Seeds, stream_id: int, n: int) -> torch.Tensor:
    """[K, n] 32-bit hashes (in int64) of counters 0..n-1; distinct within a row, no ties."""
    return _bits32(seeds, stream_id, n).view(torch.uint32).to(torch.int64)


def _shape(shape: int | tuple[int, ...]) -> tuple[int, ...]:
    return (shape,) if isinstance(shape, int) else tuple(shape)


def uniform(
    seeds: Seeds,
    stream_id: int,
    shape: int | tuple[int, ...],
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """[K, *shape] uniforms in the open interval (0, 1), exactly representable in `dtype`."""
    shape = _shape(shape)
    n_bits = min(32, -round(math.log2(torch.finfo(dtype).eps)))
    h = _bits32(seeds, stream_id, math.prod(shape))
    if n_bits < 32:  # the top n_bits of each word (a logical shift), else the whole unsigned word
        h = (h >> (32 - n_bits)).bitwise_and_((1 << n_bits) - 1)
    else:
        h = h.view(torch.uint32)
    return h.to(dtype).add_(0.5).mul_(2.0**-n_bits).reshape(len(seeds), *shape)


def normal(
    seeds: Seeds,
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
    seeds: Seeds, stream_id: int, shape: int | tuple[int, ...], p: float
) -> torch.Tensor:
    """[K, *shape] booleans, True with probability p (to within 2**-32), independent of dtype."""
    shape = _shape(shape)
    threshold = round(p * 2**32)
    return (bits(seeds, stream_id, math.prod(shape)) < threshold).reshape(len(seeds), *shape)


def permutation(seeds: Seeds, stream_id: int, n: int) -> torch.Tensor:
    """[K, n] independent random permutations of 0..n-1 (argsort of distinct hashes)."""
    return torch.argsort(bits(seeds, stream_id, n), dim=1)
