"""The engine's compiled C kernels, an optional speed-up for training on the CPU: each source is built by the C
compiler in one explicit step (``arena kernels build``, which ``make setup`` runs), never at run time, and loaded
through ctypes; wherever a kernel is not built the callers run eager tensor passes that give the same results (to
float rounding, bit for bit for the random draws), and the first such caller in a process logs a one-line notice.

A library lives in ``$ARENA_KERNELS_DIR`` (default: the arena's cache folder, ``$ARENA_CACHE_DIR`` or
``~/.cache/privacy-arena``, under ``kernels/``), named by its kernel's name and a hash of its source, flags and the
CPU it was built for (``-march=native``): a library built on another CPU or from another source is never loaded,
and deleting the folder is always safe. A library is loaded only if it and its folder are the user's own and
writable by no one else. Nothing happens at import.

``ARENA_KERNELS``: ``auto`` (the default) loads what is built and says once what is not; ``off`` (or ``0``) never
loads a kernel and says nothing; ``on`` (or ``1``) requires every kernel a caller asks for to be built, raising
where one is not (CI's kernels-on pass).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from arena.privacy.noise_store import cache_root

SWITCH = "ARENA_KERNELS"
"""``auto`` | ``off`` | ``on``: load what is built | never load a kernel | raise where one is not built."""
FOLDER = "ARENA_KERNELS_DIR"
"""Where the built libraries live (default: ``kernels/`` in the arena's cache folder)."""
MODES = {"auto": "auto", "": "auto", "off": "off", "0": "off", "on": "on", "1": "on"}
NOTICE = ("arena: the compiled CPU kernels are not built for this machine, so DP-SGD and batched training on the CPU "
          "run in pure PyTorch (the same results, slower); build them with `arena kernels build` (needs a C "
          "compiler), or set ARENA_KERNELS=off to run without them and without this notice")
"""The one line a process logs (``arena.engine.native``'s logger) the first time a caller finds a kernel missing."""
_noticed = False

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


def mode() -> str:
    """``ARENA_KERNELS`` read: ``auto``, ``off`` or ``on``; another value is an error naming the variable."""
    value = os.environ.get(SWITCH, "auto").strip().lower()
    if value not in MODES:
        raise ValueError(f"{SWITCH}={os.environ[SWITCH]!r}: expected auto, off or on (or 0 / 1)")
    return MODES[value]


def folder() -> Path:
    """Where the built libraries live: ``$ARENA_KERNELS_DIR``, else ``kernels/`` in the arena's cache folder."""
    return Path(os.environ[FOLDER]) if os.environ.get(FOLDER) else cache_root() / "kernels"


def path(name: str, source: str) -> Path:
    """The library of kernel ``name`` built from ``source`` with ``FLAGS`` for this CPU."""
    digest = hashlib.sha256("\0".join([source, *FLAGS, platform.machine(), _cpu()]).encode()).hexdigest()[:16]
    return folder() / f"{name}-{digest}.so"


def build(name: str, source: str) -> Path:
    """Compile kernel ``name`` for this CPU into ``folder()`` unless it is there already; its path. Atomic (a
    unique temporary in the folder, then a rename), so processes building at once never load a half-written file.
    Raises ``FileNotFoundError`` without a C compiler (``$CC``, else ``cc``) and ``subprocess.CalledProcessError``
    (its ``stderr`` the compiler's) where the source does not compile."""
    target = path(name, source)
    if target.exists():
        return target
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        raise FileNotFoundError(f"no C compiler: neither $CC nor cc is on the PATH ({os.environ.get('CC', 'cc')})")
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        src, out = Path(tmp) / "kernel.c", Path(tmp) / target.name
        src.write_text(source)
        subprocess.run([compiler, *FLAGS, "-o", str(out), str(src)], check=True, capture_output=True, text=True,
                       timeout=300)
        out.chmod(0o755)  # whatever the umask: ``_trusted`` refuses a library others could write
        os.replace(out, target)
    return target


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
    """Kernel ``name``'s library built from ``source``, its functions typed by ``bind``; None where kernels are
    off, and where it is not built (``on``: an error) or not trusted, after the process's one notice. Never
    compiles. Callers cache the result for their process."""
    chosen = mode()
    if chosen == "off":
        return None
    target = path(name, source)
    if chosen == "on" and not target.exists():
        raise RuntimeError(f"{SWITCH}=on but kernel {name!r} is not built for this CPU and source at {target}: "
                           "run `arena kernels build`")
    try:
        if target.exists() and _trusted(target):
            return bind(ctypes.CDLL(str(target)))
    except OSError:
        pass  # unreadable or not a library for this process: the eager passes, as where it is not built
    _notice()  # also a library another user owns (a sandboxed attack's process): never loaded, even with ``on``
    return None


def _notice() -> None:
    """Log ``NOTICE`` once per process."""
    global _noticed
    if not _noticed:
        _noticed = True
        logging.getLogger(__name__).warning(NOTICE)
