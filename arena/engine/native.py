"""The engine's compiled C kernels: each source is built by the C compiler on first use in a process, at most once
per machine, and loaded through ctypes; wherever that cannot happen the callers run eager tensor passes instead.

A library is cached in the arena's cache folder (``$ARENA_CACHE_DIR``, default ``~/.cache/privacy-arena``), under
``kernels/``, named by its kernel's name and a hash of its source, flags and the CPU it was built for
(``-march=native``); deleting it is always safe. A cached library is loaded only if it and its folder are the
user's own and writable by no one else. Nothing happens at import. Without a compiler, a writable cache, or with
``ARENA_KERNELS=0``, ``load`` returns None.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from arena.privacy.noise_store import cache_root

SWITCH = "ARENA_KERNELS"
"""``0``: never compile or load a kernel (the eager tensor passes run everywhere)."""

FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-shared", "-fPIC") + (
    ("-mprefer-vector-width=512",) if platform.machine() in ("x86_64", "AMD64") else ())
"""-ffp-contract=off: no fused multiply-adds, so each float32 product rounds as torch's does; -fno-math-errno: a
square root that vectorises (its argument is never negative); on x86-64, 512-bit vectors where the CPU has them
(GCC's default for -march=native is 256: ~17 % slower normals on an AVX-512 Xeon; a no-op without AVX-512)."""


DOT = r"""
/* sum of x[j] * y[j], j < n, in 16 running partial sums (vectorises without flags that reassociate) */
static inline float dot(const float *x, const float *y, int64_t n) {
    float acc[16] = {0};
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int l = 0; l < 16; l++) acc[l] += x[j + l] * y[j + l];
    float s = 0.0f;
    for (; j < n; j++) s += x[j] * y[j];
    for (int l = 0; l < 16; l++) s += acc[l];
    return s;
}
"""
"""C shared by the kernels' sources (after ``#include <stdint.h>``): a dot product in a fixed order of sums."""


def _cpu() -> str:
    """What -march=native compiles for: the CPU's model and feature flags where Linux lists them."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    return "\n".join(sorted({ln for ln in lines if ln.split(":")[0].strip() in ("flags", "model name", "Features")}))


def _build(target: Path, source: str, compiler: str) -> None:
    """Compile ``source`` to ``target`` atomically (a unique temporary in its folder, then a rename), so that
    processes building at once never load a half-written file."""
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        src, out = Path(tmp) / "kernel.c", Path(tmp) / target.name
        src.write_text(source)
        subprocess.run([compiler, *FLAGS, "-o", str(out), str(src)], check=True, capture_output=True, timeout=120)
        out.chmod(0o755)  # whatever the umask: ``_trusted`` refuses a library others could write
        os.replace(out, target)


def _trusted(path: Path) -> bool:
    """Whether a cached library may be loaded: code, unlike a cache's data, must be the current user's own and
    writable by no one else, in a folder no one else can write to."""
    uid = os.getuid() if hasattr(os, "getuid") else None
    for item in (path, path.parent):
        st = item.stat()
        if st.st_mode & 0o022 or (uid is not None and st.st_uid != uid):
            return False
    return True


def load(name: str, source: str, bind: Callable[[ctypes.CDLL], ctypes.CDLL]) -> ctypes.CDLL | None:
    """Kernel ``name`` compiled from ``source`` (or loaded from the cache), its functions typed by ``bind``; None
    where kernels are disabled or cannot be built. Callers cache the result for their process."""
    if os.environ.get(SWITCH, "1") == "0":
        return None
    digest = hashlib.sha256("\0".join([source, *FLAGS, platform.machine(), _cpu()]).encode()).hexdigest()[:16]
    target = cache_root() / "kernels" / f"{name}-{digest}.so"
    try:
        if not target.exists():
            compiler = shutil.which(os.environ.get("CC", "cc"))
            if compiler is None:
                return None
            _build(target, source, compiler)
        if not _trusted(target):
            return None
        return bind(ctypes.CDLL(str(target)))
    except (OSError, subprocess.SubprocessError):
        return None
