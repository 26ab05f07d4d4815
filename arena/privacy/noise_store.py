"""Noise calibrations kept on disk, so that every process of a run (a matchup's child, a Ray worker, a rerun)
calibrates a DP-SGD configuration once, not once per seed: a bisection takes about eleven accountant calls.

An entry is only a hint: ``accounting.calibrate_noise`` re-computes the ε of the stored σ with the accountant and
uses it only if it meets the calibration's contract, so a stale, torn or tampered entry can cost one accountant
call, never a wrong claim. The folder is ``$ARENA_CACHE_DIR`` (default ``~/.cache/privacy-arena``), made private
to its user; a folder that cannot be written is skipped silently (the calibration is then computed as before).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import tempfile
from pathlib import Path

CACHE_ENV = "ARENA_CACHE_DIR"
NAMESPACE = "noise-calibration"


def cache_root() -> Path:
    """Where the arena keeps what it may recompute: ``$ARENA_CACHE_DIR``, else the user's cache folder."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "privacy-arena"


def _path(key: tuple) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return cache_root() / NAMESPACE / f"{digest}.json"


def load_sigma(key: tuple) -> float | None:
    """The σ stored for ``key``, or None (absent, unreadable, or not a positive finite number)."""
    try:
        value = json.loads(_path(key).read_text())["sigma"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def store_sigma(key: tuple, sigma: float) -> None:
    """Keep ``sigma`` for ``key``, written whole (a temporary file renamed into place) or not at all."""
    path = _path(key)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"key": list(key), "sigma": sigma}, f)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
