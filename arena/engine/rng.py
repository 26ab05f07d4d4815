"""Counter-based random numbers: model k's draws depend only on (seed_k, stream, counter).

Stateless hashing instead of a generator object, so a model gets the same randomness whether it is trained alone
or in a batch of any size, on any device.

The generator is SplitMix64 (Steele, Lea & Flood 2014, the seeding generator of xoshiro and of Java's
SplittableRandom): word c of a stream is ``mix64(key + (c + 1)·γ)`` with γ the 64-bit golden ratio and ``mix64``
the variant-13 finaliser (Stafford), a bijection of 64-bit words; a stream's key is ``mix64`` of the model's key
xor ``mix64`` of the stream id. Each word gives two 24-bit uniforms (float32) or one 53-bit uniform (float64), so
a float32 normal costs half a 64-bit hash; SplitMix64's output on consecutive counters passes BigCrush.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from enum import IntEnum

import torch

from arena.engine import box_muller, rng_kernel

_INDEX_BITS = 24
_GOLDEN = 0x9E3779B97F4A7C15
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_SEED_SALT = 0x243F6A8885A308D3  # the first hex digits of π: seed 0 does not start from key 0
_U64 = (1 << 64) - 1


class Purpose(IntEnum):
    """What a stream of random numbers is used for; the high bits of the stream id."""

    INIT = 1
    SHUFFLE = 2
    POISSON = 3
    NOISE = 4
    AUGMENT = 5
    CANARY = 6
    """Which of a model's white-box gradient canaries each DP-SGD step samples
    (an audit's, ``trainer.GradientCanaries``)."""


def stream(purpose: Purpose, index: int = 0) -> int:
    """Stream id for `purpose` at `index` (an epoch or a step); distinct pairs give distinct ids."""
    if not 0 <= index < 1 << _INDEX_BITS:
        raise ValueError(f"stream index {index} outside [0, 2**{_INDEX_BITS})")
    return int(purpose) << _INDEX_BITS | index


def _i64(word: int) -> int:
    """The int64 value whose bits are the unsigned 64-bit `word`."""
    word &= _U64
    return word - (1 << 64) if word >= 1 << 63 else word


def mix64(x: int) -> int:
    """SplitMix64's finaliser on one unsigned 64-bit word, in plain Python integers (the reference)."""
    x &= _U64
    x = ((x ^ (x >> 30)) * _M1) & _U64
    x = ((x ^ (x >> 27)) * _M2) & _U64
    return x ^ (x >> 31)


def _xorshift_(x: torch.Tensor, shift: int, scratch: torch.Tensor) -> None:
    """x ^= x >>> shift (a logical shift of the 64-bit words in int64 storage), with no new allocation."""
    torch.bitwise_right_shift(x, shift, out=scratch)
    x.bitwise_xor_(scratch.bitwise_and_((1 << (64 - shift)) - 1))


def _mix64_(x: torch.Tensor, scratch: torch.Tensor | None = None, last: bool = True) -> torch.Tensor:
    """``mix64`` in place on int64 storage of unsigned words; products wrap mod 2**64 (two's complement, as torch's
    kernels do: the bit-exact reference test would catch a backend that did not). ``scratch``: a tensor like x to
    reuse, so that a large hash allocates nothing (fresh multi-megabyte temporaries page-fault on every step).
    ``last=False`` stops before the final xorshift (a caller that reads only some bits folds it in itself)."""
    scratch = torch.empty_like(x) if scratch is None else scratch
    _xorshift_(x, 30, scratch)
    x.mul_(_i64(_M1))
    _xorshift_(x, 27, scratch)
    x.mul_(_i64(_M2))
    if last:
        _xorshift_(x, 31, scratch)
    return x


class Keys:
    """Model seeds prepared for drawing: each model's 64-bit key, derived once.

    Every function here takes raw int64 seeds [K] or Keys; a loop drawing from a new stream every step (the
    trainer) passes Keys so that each draw only mixes in its stream id.
    """

    def __init__(self, seeds: torch.Tensor) -> None:
        self.key = _mix64_(seeds.to(torch.int64) ^ _i64(_SEED_SALT))  # [K]

    def __len__(self) -> int:
        return self.key.shape[0]

    def stream_keys(self, stream_id: StreamIds) -> torch.Tensor:
        """[K] the key of stream ``stream_id`` of each model; [S·K] for S stream ids (stream-major)."""
        ids = [_i64(mix64(s)) for s in ([stream_id] if isinstance(stream_id, int) else stream_id)]
        lib = rng_kernel.usable(self.key)
        if lib is not None:  # one call: the eager passes below cost ~20 µs even for one model
            out = torch.empty(len(ids) * len(self), dtype=torch.int64)
            lib.arena_stream_keys(self.key.data_ptr(), len(self), _int64s(ids), len(ids), out.data_ptr())
            return out
        if isinstance(stream_id, int):
            return _mix64_(self.key ^ ids[0])
        mixed = torch.tensor(ids, dtype=torch.int64, device=self.key.device)
        return _mix64_((mixed.unsqueeze(1) ^ self.key).reshape(-1))


StreamIds = int | Sequence[int]
"""One stream id, or several: a draw from S streams at once returns [S, K, ...], row s·K + k exactly the draw of
stream s alone (one call instead of S, which at K = 1 is mostly fixed per-call cost)."""


Seeds = torch.Tensor | Keys


def _keys(seeds: Seeds) -> Keys:
    return seeds if isinstance(seeds, Keys) else Keys(seeds)


class Workspace:
    """Buffers a loop of same-sized draws reuses (the trainer's noise, one draw per step), so that a draw allocates
    nothing: on CPU a fresh multi-megabyte temporary can cost more in page faults than the arithmetic done in it.
    A result drawn with a workspace is a view of its memory, valid until the next draw with the same workspace."""

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}

    def get(self, name: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        buf = self._buffers.get(name)
        if buf is None or buf.shape != shape or buf.dtype != dtype or buf.device != device:
            buf = self._buffers[name] = torch.empty(shape, dtype=dtype, device=device)
        return buf


def _counters(n: int, device: torch.device, ws: Workspace | None) -> torch.Tensor:
    """[n] (c + 1)·γ mod 2**64 for c = 0..n-1, the SplitMix64 increments."""
    if ws is not None:
        steps = ws._buffers.get("counters")
        if steps is not None and steps.shape == (n,) and steps.device == device:
            return steps
    steps = torch.arange(1, n + 1, dtype=torch.int64, device=device).mul_(_i64(_GOLDEN))
    if ws is not None:
        ws._buffers["counters"] = steps
    return steps


def _hash(
    seeds: Seeds, stream_id: StreamIds, n: int, ws: Workspace | None = None, last: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """([K, n] int64 storage of the 64-bit words 0..n-1 of the stream, distinct within a row, [S·K, n] for S
    streams; a scratch tensor of the same shape). ``last``: as in ``_mix64_``."""
    if n >= 1 << 62:
        raise ValueError("at most 2**62 draws per stream")
    keys = _keys(seeds).stream_keys(stream_id)
    shape = (keys.shape[0], n)
    if ws is None:
        words, scratch = torch.empty(shape, dtype=torch.int64, device=keys.device), None
    else:
        words = ws.get("words", shape, torch.int64, keys.device)
        scratch = ws.get("scratch", shape, torch.int64, keys.device)
    scratch = torch.empty_like(words) if scratch is None else scratch
    lib = rng_kernel.usable(words) if last else None
    if lib is not None:
        lib.arena_words(keys.data_ptr(), shape[0], 0, n, words.data_ptr(), n)
        return words, scratch
    torch.add(keys.unsqueeze(1), _counters(n, keys.device, ws), out=words)
    return _mix64_(words, scratch, last), scratch


def _rows(seeds: Seeds, stream_id: StreamIds) -> tuple[int, ...]:
    """The leading shape of a draw: (K,) from one stream, (S, K) from S."""
    K = len(_keys(seeds))
    return (K,) if isinstance(stream_id, int) else (len(stream_id), K)


def bits(seeds: Seeds, stream_id: int, n: int) -> torch.Tensor:
    """[K, n] random 64-bit words (int64 storage) of counters 0..n-1; distinct within a row, so no ties."""
    return _hash(seeds, stream_id, n)[0]


def _shape(shape: int | tuple[int, ...]) -> tuple[int, ...]:
    return (shape,) if isinstance(shape, int) else tuple(shape)


def _mantissa_bits(dtype: torch.dtype) -> int:
    """Bits k of a uniform (k + 1/2)·2**-bits exactly representable in ``dtype``: 23 for float32, 52 for float64."""
    return -round(math.log2(torch.finfo(dtype).eps))


def _field(words: torch.Tensor, shift: int, n_bits: int, out: torch.Tensor, scratch: torch.Tensor) -> torch.Tensor:
    """``out`` = (words >>> shift) mod 2**n_bits as floats (exact), via ``scratch``; no other allocation."""
    torch.bitwise_right_shift(words, shift, out=scratch).bitwise_and_((1 << n_bits) - 1)
    return out.copy_(scratch)


def uniform(
    seeds: Seeds,
    stream_id: int,
    shape: int | tuple[int, ...],
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """[K, *shape] uniforms (k + 1/2)·2**-b in the open interval (0, 1), exact in ``dtype``: k is the top b bits of
    word i (b = 23 for float32, 52 for float64)."""
    shape = _shape(shape)
    n_bits = _mantissa_bits(dtype)
    words, scratch = _hash(seeds, stream_id, math.prod(shape))
    out = torch.empty(words.shape, dtype=dtype, device=words.device)
    _field(words, 64 - n_bits, n_bits, out, scratch).add_(0.5).mul_(2.0**-n_bits)
    return out.reshape(len(words), *shape)


def normal(
    seeds: Seeds,
    stream_id: StreamIds,
    shape: int | tuple[int, ...],
    dtype: torch.dtype = torch.float32,
    workspace: Workspace | None = None,
) -> torch.Tensor:
    """[K, *shape] standard normals by Box–Muller, both outputs used ([S, K, *shape] for S stream ids).

    With h = ⌈n/2⌉ pairs, pair j gives element j (r cos θ) and element h + j (r sin θ), r = √(−2 ln u₁),
    θ = 2π u₂, u₁ = (k₁ + 1)·2**-b ∈ (0, 1] and u₂ = k₂·2**-b ∈ [0, 1), with b = 24 bits in float32 (k₁, k₂ the top
    24 bits of the two 32-bit halves of word j) and b = 53 in float64 (the top 53 bits of words j and h + j).
    float32 (and narrower) draws compute r, cos θ and sin θ from exact float32 operations (``box_muller``), so the
    compiled kernel and the eager passes give the same bits (on CUDA too by construction; not yet run on a GPU);
    float64 draws use torch's log, sin and cos.
    Every step runs in place in buffers of the output's size (reused from ``workspace`` when given).
    """
    shape = _shape(shape)
    n = math.prod(shape)
    h = (n + 1) // 2
    n_bits = _mantissa_bits(dtype) + 1
    workspace = Workspace() if workspace is None else workspace
    if n_bits <= 32:
        out = _normal_split(_keys(seeds).stream_keys(stream_id), h, n_bits, dtype, workspace)
    else:
        words, scratch = _hash(seeds, stream_id, 2 * h, workspace)
        out = workspace.get("normal", (words.shape[0], 2, h), dtype, words.device)
        radius, sine = out[:, 0], out[:, 1]
        _field(words[:, :h], 64 - n_bits, n_bits, radius, scratch[:, :h])
        angle = _field(words[:, h:], 64 - n_bits, n_bits, sine, scratch[:, h:])
        radius.add_(1.0).mul_(2.0**-n_bits).log_().mul_(-2.0).sqrt_()
        angle.mul_(2.0 * math.pi * 2.0**-n_bits)
        cosine = scratch.view(dtype)[:, :h]  # the scratch words are free again: reuse their memory
        torch.cos(angle, out=cosine)
        angle.sin_().mul_(radius)
        radius.mul_(cosine)
    R = out.shape[0]
    flat = out.view(R, 2 * h)
    return (flat if n == 2 * h else flat[:, :n]).reshape(*_rows(seeds, stream_id), *shape)


class NormalAdder:
    """Adds ``alpha ·`` a stream's n float32 normals (``normal``'s, the same bits) into tensors of one layout, by the
    compiled kernel in one pass that never writes the normals out; each sum rounds once, as torch's does.

    ``layout``: per tensor its shape [K, ...], strides and start, so that it takes elements start .. start + size − 1
    of each model's draw, row k laid out in the draw's order in one block of memory from its first element on (it
    need not be contiguous in its own index order: a weight gradient held transposed is one block in the module's
    order). Checked once here; a call takes tensors of exactly this layout (float32, on the CPU)."""

    def __init__(self, layout: Sequence[tuple[tuple[int, ...], tuple[int, ...], int]], n: int) -> None:
        self.order = sorted(range(len(layout)), key=lambda i: layout[i][2])
        sizes = [math.prod(layout[i][0][1:]) for i in self.order]
        starts = [layout[i][2] for i in self.order]
        if not all(_dense_rows(*layout[i][:2]) for i in self.order):
            raise ValueError("each tensor's rows must be dense blocks of memory that do not overlap")
        if any(a + size > b for a, size, b in zip(starts, sizes, starts[1:])) or any(
                start < 0 or start + size > n for start, size in zip(starts, sizes)):
            raise ValueError("the tensors' elements of a draw must not overlap and must lie within its n")
        self.n, self.rows = n, {layout[i][0][0] for i in self.order}
        self.bits = _mantissa_bits(torch.float32) + 1
        self.unit = box_muller.angle_unit(self.bits)
        self.layout = [(tuple(shape), tuple(stride)) for shape, stride, _ in layout]
        self.starts, self.sizes = _int64s(starts), _int64s(sizes)
        self.strides = _int64s([layout[i][1][0] for i in self.order])

    def __call__(self, seeds: Keys, stream_id: int, alpha: float, tensors: Sequence[torch.Tensor],
                 then: tuple[HeavyBallPlan, Sequence[torch.Tensor]] | None = None) -> bool:
        """``tensors[i] += alpha ·`` its elements of each model's draw, and ``then`` (a plan and the current
        velocities) its heavy-ball step on them in the same pass; False, and nothing done, where the kernel cannot
        run (then draw with ``normal``, add, and step)."""
        lib = rng_kernel.usable(seeds.key)
        if lib is None or self.rows != {len(seeds)}:
            return False
        extra: tuple = (None, None, None, 0.0, 0.0)
        if then is not None:
            plan, velocity = then
            if not plan.usable or plan.layout != self.layout or not all(
                    v.is_cpu and v.dtype == torch.float32 and v.shape == shape and v.stride() == stride
                    for v, (shape, stride) in zip(velocity, plan.layout)):
                return False  # the kernel reads each at the offsets of the tensor it belongs to
            extra = (_int64s([velocity[i].data_ptr() for i in self.order]), *plan.arrays(self.order), plan.momentum,
                     plan.lr)
        lib.arena_add_normals32(seeds.key.data_ptr(), len(seeds), _i64(mix64(stream_id)), self.n, self.bits,
                                self.unit, alpha, len(self.order),
                                _int64s([tensors[i].data_ptr() for i in self.order]), self.starts, self.sizes,
                                self.strides, *extra)
        return True


class HeavyBallPlan:
    """The heavy-ball step ``NormalAdder`` can take in the noise's pass (``steps.HeavyBall.step``'s arithmetic, in
    its order): g += l2·w; g += momentum·v; w += −lr·g, where g is a tensor the noise went into, v and w its velocity
    and parameters (laid out as g), l2 its weight decay; g becomes the new velocity. Made once per optimizer: the
    parameters are updated in place, so their memory and layout never change."""

    def __init__(self, params: Sequence[torch.Tensor], l2: Sequence[float], momentum: float, lr: float) -> None:
        self.layout = [(tuple(p.shape), p.stride()) for p in params]
        self.usable = all(p.is_cpu and p.dtype == torch.float32 for p in params)
        self.momentum, self.lr = momentum, lr
        self._pointers, self._l2 = [p.data_ptr() for p in params], list(l2)
        self._arrays: dict[tuple[int, ...], tuple[ctypes.Array, ctypes.Array]] = {}

    def arrays(self, order: Sequence[int]) -> tuple[ctypes.Array, ctypes.Array]:
        """The parameters' addresses and weight decays in the kernel's ``order`` of the tensors."""
        key = tuple(order)
        if key not in self._arrays:
            self._arrays[key] = (_int64s([self._pointers[i] for i in order]),
                                 (ctypes.c_float * len(order))(*(self._l2[i] for i in order)))
        return self._arrays[key]


def _int64s(values: list[int]) -> ctypes.Array:
    return (ctypes.c_int64 * len(values))(*values)


def _dense_rows(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether each row t[k] of a tensor of this shape and these strides fills one block of memory without gaps
    (whatever its index order), the blocks apart."""
    dims = sorted((st, size) for st, size in zip(strides[1:], shape[1:]) if size > 1)
    expected = 1
    for st, size in dims:
        if st != expected:
            return False
        expected *= size
    return shape[0] == 1 or strides[0] >= expected


_BLOCK = 1 << 16
"""Pairs of normals (over all rows) that one block of the eager float32 draw hashes and transforms at a time: its
word buffers and fields stay in cache through the ~40 passes, instead of streaming the whole draw through memory."""


def _normal_split(keys: torch.Tensor, h: int, n_bits: int, dtype: torch.dtype, ws: Workspace) -> torch.Tensor:
    """[R, 2, h] float32 Box–Muller pairs of stream keys [R] (``box_muller``): one pass of the compiled kernel, or
    eager passes in column blocks of ``_BLOCK`` pairs, the same bits."""
    R = keys.shape[0]
    out = ws.get("normal", (R, 2, h), dtype, keys.device)
    lib = rng_kernel.usable(keys) if dtype == torch.float32 else None
    if lib is not None:
        lib.arena_normals32(keys.data_ptr(), R, 0, h, n_bits, box_muller.angle_unit(n_bits), out[:, 0].data_ptr(),
                            out[:, 1].data_ptr(), 2 * h)
        return out
    width = min(h, max(1024, _BLOCK // R)) if keys.device.type == "cpu" else h  # a GPU wants few, large passes
    words = ws.get("words", (R, width), torch.int64, keys.device)
    scratch = ws.get("scratch", (R, width), torch.int64, keys.device)
    fields = ws.get("fields", (2, R, width), torch.int32, keys.device)
    counters = _counters(h, keys.device, ws)
    for start in range(0, h, width):
        end = min(h, start + width)
        w, s, f = words[:, : end - start], scratch[:, : end - start], fields[:, :, : end - start]
        torch.add(keys.unsqueeze(1), counters[start:end], out=w)
        _mix64_(w, s, last=False)
        _split_fields(w, s, f, n_bits)
        box_muller.eager(f[0], f[1], out[:, 0, start:end], out[:, 1, start:end], n_bits)
    return out


def _split_fields(words: torch.Tensor, scratch: torch.Tensor, fields: torch.Tensor, n_bits: int) -> None:
    """``normal``'s float32 fields k₁, k₂ into ``fields`` [2, R, w] (32-bit integers) from ``words`` hashed up to the
    final xorshift x ^= x >>> 31, which leaves k₁ (bits 63..40) unchanged and is folded into k₂ (bits 31..8 of
    x ^ (x >> 31), with an arithmetic shift, whose sign bits land above bit 32). The fields are narrowed before
    their last shifts and masks: those passes cost a third of their 64-bit ones."""
    mask = (1 << n_bits) - 1
    k1, k2 = fields[0], fields[1]
    torch.bitwise_right_shift(words, 31, out=scratch).bitwise_xor_(words)
    k2.copy_(scratch)  # the low 32 bits (a truncating copy)
    k2.bitwise_right_shift_(32 - n_bits).bitwise_and_(mask)
    k1.copy_(words.bitwise_right_shift_(64 - n_bits))
    k1.bitwise_and_(mask)


def bernoulli(
    seeds: Seeds, stream_id: StreamIds, shape: int | tuple[int, ...], p: float
) -> torch.Tensor:
    """[K, *shape] booleans, True with probability p (to within 2**-53), independent of dtype ([S, K, *shape] for
    S stream ids)."""
    shape = _shape(shape)
    threshold = round(p * 2.0**53)
    keys = _keys(seeds).stream_keys(stream_id)
    lib = rng_kernel.usable(keys)
    if lib is not None:
        coins = torch.empty(keys.shape[0], math.prod(shape), dtype=torch.bool)
        lib.arena_bernoulli(keys.data_ptr(), keys.shape[0], coins.shape[1], threshold, coins.data_ptr())
        return coins.reshape(*_rows(seeds, stream_id), *shape)
    words = _hash(seeds, stream_id, math.prod(shape))[0]
    top = torch.bitwise_right_shift(words, 11, out=words).bitwise_and_((1 << 53) - 1)  # the top 53 bits
    return (top < threshold).reshape(*_rows(seeds, stream_id), *shape)


def sampled_rows(
    seeds: Seeds, stream_id: StreamIds, n: int, p: float, present: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Poisson sampling: per row (model, or stream and model), the indices c < n whose ``bernoulli`` coin came up
    and where ``present`` [K, n] is True (None: everywhere), ascending, then zeros ([*rows, n] int64), and their
    counts [*rows]; only the first (largest count of a stream's K rows) columns are defined. The same numbers as
    ``rows_of`` the coins there, in one pass of the kernel where it runs."""
    keys = _keys(seeds).stream_keys(stream_id)
    rows, R, K = _rows(seeds, stream_id), keys.shape[0], len(_keys(seeds))
    lib = rng_kernel.usable(keys) if present is None else rng_kernel.usable(keys, present)
    if lib is None:
        coins = bernoulli(seeds, stream_id, n, p).reshape(-1, K, n)
        idx, counts = rows_of((coins if present is None else coins & present).reshape(R, n))
    else:
        idx, counts = torch.empty(R, n, dtype=torch.int64), torch.empty(R, dtype=torch.int64)
        mask = None if present is None else present.to(torch.bool).contiguous()
        lib.arena_sampled_rows(keys.data_ptr(), R, n, round(p * 2.0**53), None if mask is None else mask.data_ptr(),
                               K, idx.data_ptr(), counts.data_ptr())
    return idx.reshape(*rows, n), counts.reshape(rows)


def rows_of(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """([R, n] the indices of each row's True entries of ``mask`` [R, n], ascending, then zeros; [R] their counts),
    from one ``nonzero`` (row-major, so each row's are ascending and contiguous) scattered into their rows."""
    rows, cols = mask.nonzero(as_tuple=True)
    counts = mask.sum(dim=1)
    first = torch.cumsum(counts, 0).sub_(counts)  # where each row's entries start in ``cols``
    idx = torch.zeros(mask.shape, dtype=torch.int64, device=mask.device)
    idx[rows, torch.arange(cols.shape[0], device=cols.device).sub_(first[rows])] = cols
    return idx, counts


def permutation(seeds: Seeds, stream_id: int, n: int) -> torch.Tensor:
    """[K, n] independent random permutations of 0..n-1 (argsort of distinct hashes)."""
    return torch.argsort(bits(seeds, stream_id, n), dim=1)
