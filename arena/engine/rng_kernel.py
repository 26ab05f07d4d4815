"""The counter RNG in one pass of compiled C: the SplitMix64 words, Poisson coins (and the rows they sample) and
float32 normals that ``arena.engine.rng`` otherwise builds from ~20 eager int64 and ~40 float32 tensor passes.

Only exact operations run here (64-bit integer arithmetic, integer-to-float conversions, float32 operations each
rounded once, no fused multiply-adds: ``arena.engine.box_muller``'s formula), so a draw is bit for bit the same with
or without the kernel (tests/engine/test_rng_kernel.py).

The library is compiled by the C compiler (``$CC``, else ``cc``) on first use in a process, at most once per
machine: it is cached in the arena's cache folder (``$ARENA_CACHE_DIR``, default ``~/.cache/privacy-arena``), under
``kernels/``, named by a hash of its source, flags and the CPU it was built for (``-march=native``); deleting it is
always safe. A cached library is loaded only if it and its folder are the user's own and writable by no one else.
Nothing happens at import. Without a compiler, a writable cache, or with ``ARENA_RNG_KERNEL=0``, ``library()`` is
None and the eager tensor passes run instead.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from arena.engine import box_muller
from arena.privacy.noise_store import cache_root

SOURCE = r"""
#include <stdint.h>
""" + box_muller.C_SOURCE + r"""
#define GOLDEN 0x9E3779B97F4A7C15ULL
static inline uint64_t mix(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}
/* out[r, c] = mix64(keys[r] + (first + c + 1) * GOLDEN), c < n; rows `stride` apart */
void arena_words(const int64_t *keys, int64_t rows, int64_t first, int64_t n, int64_t *out, int64_t stride) {
    for (int64_t r = 0; r < rows; r++) {
        const uint64_t k = (uint64_t)keys[r];
        uint64_t *o = (uint64_t *)(out + r * stride);
        for (int64_t c = 0; c < n; c++) o[c] = mix(k + (uint64_t)(first + c + 1) * GOLDEN);
    }
}
/* out[r, c] = (word c of row r) >>> 11 < threshold: a coin with probability threshold / 2^53 */
void arena_bernoulli(const int64_t *keys, int64_t rows, int64_t n, int64_t threshold, uint8_t *out) {
    for (int64_t r = 0; r < rows; r++) {
        const uint64_t k = (uint64_t)keys[r];
        uint8_t *o = out + r * n;
        for (int64_t c = 0; c < n; c++) o[c] = (int64_t)(mix(k + (uint64_t)(c + 1) * GOLDEN) >> 11) < threshold;
    }
}
/* per row, the counters c < n whose coin (as arena_bernoulli's) came up and whose present[r % models, c] is set
   (present NULL: all are), ascending in idx[r, :counts[r]], then zeros up to the largest count of rows
   r - r % models .. r - r % models + models - 1 (one step's models); the rest of idx is left unwritten */
void arena_sampled_rows(const int64_t *keys, int64_t rows, int64_t n, int64_t threshold, const uint8_t *present,
                        int64_t models, int64_t *idx, int64_t *counts) {
    for (int64_t r = 0; r < rows; r++) {
        const uint64_t k = (uint64_t)keys[r];
        const uint8_t *pr = present ? present + (r % models) * n : 0;
        int64_t *o = idx + r * n, m = 0;
        uint8_t coin[256];
        for (int64_t c0 = 0; c0 < n; c0 += 256) {
            const int64_t w = n - c0 < 256 ? n - c0 : 256;
            for (int64_t j = 0; j < w; j++)  /* the hashes of a block first, vectorised */
                coin[j] = (int64_t)(mix(k + (uint64_t)(c0 + j + 1) * GOLDEN) >> 11) < threshold;
            if (pr)
                for (int64_t j = 0; j < w; j++) coin[j] &= pr[c0 + j] != 0;
            for (int64_t j = 0; j < w; j++) {
                o[m] = c0 + j;
                m += coin[j];
            }
        }
        counts[r] = m;
        if (r % models == models - 1) {  /* a step's last model: zeros up to the step's largest count */
            int64_t most = 0;
            for (int64_t q = r + 1 - models; q <= r; q++) most = counts[q] > most ? counts[q] : most;
            for (int64_t q = r + 1 - models; q <= r; q++)
                for (int64_t c = counts[q]; c < most; c++) idx[q * n + c] = 0;
        }
    }
}
/* pair first + c of row r: its fields k1 = x >>> (64 - bits), k2 = bits 31..32-bits of x through box_muller, r cos θ
   into cos_out[r, c] and r sin θ into sin_out[r, c]; rows `stride` apart. Blocks of 256: the hashes first, then
   the float32 arithmetic, each loop vectorised on its own. */
void arena_normals32(const int64_t *keys, int64_t rows, int64_t first, int64_t n, int64_t bits, float unit,
                     float *cos_out, float *sin_out, int64_t stride) {
    const uint32_t mask = (1u << bits) - 1u;
    uint32_t k1[256], k2[256];
    for (int64_t r = 0; r < rows; r++) {
        const uint64_t k = (uint64_t)keys[r];
        float *co = cos_out + r * stride, *so = sin_out + r * stride;
        for (int64_t c0 = 0; c0 < n; c0 += 256) {
            const int64_t w = n - c0 < 256 ? n - c0 : 256;
            for (int64_t j = 0; j < w; j++) {
                const uint64_t x = mix(k + (uint64_t)(first + c0 + j + 1) * GOLDEN);
                k1[j] = (uint32_t)(x >> (64 - bits));
                k2[j] = ((uint32_t)x >> (32 - bits)) & mask;
            }
            for (int64_t j = 0; j < w; j++) box_muller(k1[j], k2[j], (int)bits, unit, co + c0 + j, so + c0 + j);
        }
    }
}
"""

FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-shared", "-fPIC")
"""-ffp-contract=off: no fused multiply-adds, so each float32 product rounds as torch's does; -fno-math-errno: a
square root that vectorises (its argument is never negative)."""


def _cpu() -> str:
    """What -march=native compiles for: the CPU's model and feature flags where Linux lists them."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    return "\n".join(sorted({ln for ln in lines if ln.split(":")[0].strip() in ("flags", "model name", "Features")}))


def _build(target: Path, compiler: str) -> None:
    """Compile ``SOURCE`` to ``target`` atomically (a unique temporary in its folder, then a rename), so that
    processes building at once never load a half-written file."""
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        src, out = Path(tmp) / "rng.c", Path(tmp) / target.name
        src.write_text(SOURCE)
        subprocess.run([compiler, *FLAGS, "-o", str(out), str(src)], check=True, capture_output=True, timeout=120)
        out.chmod(0o755)  # whatever the umask: ``_trusted`` refuses a library others could write
        os.replace(out, target)


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    p, i = ctypes.c_void_p, ctypes.c_int64
    lib.arena_words.argtypes = [p, i, i, i, p, i]
    lib.arena_bernoulli.argtypes = [p, i, i, i, p]
    lib.arena_sampled_rows.argtypes = [p, i, i, i, p, i, p, p]
    lib.arena_normals32.argtypes = [p, i, i, i, i, ctypes.c_float, p, p, i]
    for f in (lib.arena_words, lib.arena_bernoulli, lib.arena_sampled_rows, lib.arena_normals32):
        f.restype = None
    return lib


@functools.cache
def library() -> ctypes.CDLL | None:
    """The compiled kernels, built or loaded once per process; None where they are unavailable or disabled."""
    if os.environ.get("ARENA_RNG_KERNEL", "1") == "0":
        return None
    digest = hashlib.sha256("\0".join([SOURCE, *FLAGS, platform.machine(), _cpu()]).encode()).hexdigest()[:16]
    target = cache_root() / "kernels" / f"rng-{digest}.so"
    try:
        if not target.exists():
            compiler = shutil.which(os.environ.get("CC", "cc"))
            if compiler is None:
                return None
            _build(target, compiler)
        if not _trusted(target):
            return None
        return _bind(ctypes.CDLL(str(target)))
    except (OSError, subprocess.SubprocessError):
        return None


def _trusted(path: Path) -> bool:
    """Whether a cached library may be loaded: code, unlike a cache's data, must be the current user's own and
    writable by no one else, in a folder no one else can write to."""
    uid = os.getuid() if hasattr(os, "getuid") else None
    for item in (path, path.parent):
        st = item.stat()
        if st.st_mode & 0o022 or (uid is not None and st.st_uid != uid):
            return False
    return True


def usable(*tensors: torch.Tensor) -> ctypes.CDLL | None:
    """The library, if every tensor is a CPU tensor it can write or read directly (contiguous rows)."""
    if any(t.device.type != "cpu" for t in tensors):
        return None
    return library()
