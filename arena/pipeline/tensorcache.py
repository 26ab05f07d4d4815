"""The content-addressed tensor cache of a run directory: safetensors entries (never pickles) holding the SHA-256 of
their tensors and, with the run's secret, an HMAC binding them to their place; reads verified, as tensors or, where
torch is not loaded (a leaderboard reading the saved draws), as numpy arrays by the same digest."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import struct
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from arena.pipeline.files import _atomic_write, open_regular, warn

if TYPE_CHECKING:  # torch loads where tensors are written or read as tensors: reading rows and draws needs none
    import torch

DIGEST = "sha256"


def tensor_digest(*tensors: torch.Tensor | np.ndarray) -> str:
    """Hash of tensor contents, shapes and dtypes."""
    h = hashlib.sha256()
    torch = sys.modules.get("torch")  # a tensor exists only where torch is loaded
    for t in tensors:
        a = t.detach().cpu().numpy() if torch is not None and isinstance(t, torch.Tensor) else np.asarray(t)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:24]


def _sha256(parts: dict[str, tuple[str, tuple[int, ...], bytes]]) -> str:
    """SHA-256 over each entry's name, dtype (as torch names it), shape and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(parts):
        dtype, shape, data = parts[name]
        h.update(f"{name}|{dtype}|{shape}|".encode())
        h.update(data)
    return h.hexdigest()


def tensors_sha256(tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 over every tensor's name, dtype, shape and bytes, in name order: what a cache entry must still hold."""
    import torch

    flat = {name: t.detach().cpu().contiguous() for name, t in tensors.items()}
    return _sha256({name: (str(t.dtype), tuple(t.shape), t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
                    for name, t in flat.items()})


def arrays_sha256(arrays: dict[str, np.ndarray]) -> str:
    """``tensors_sha256`` of the same entries read as numpy arrays, without torch (whose dtype of numpy's ``float64``
    is ``torch.float64``, and so on): how an entry is verified where torch is not loaded."""
    return _sha256({name: (f"torch.{a.dtype.name}", tuple(int(n) for n in a.shape), np.ascontiguousarray(a).tobytes())
                    for name, a in arrays.items()})


def _safetensors_metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file's header (8-byte little-endian length, then JSON)."""
    (length,) = struct.unpack("<Q", data[:8])
    if length > len(data) - 8:
        raise ValueError("header longer than the file")
    meta = json.loads(data[8 : 8 + length]).get("__metadata__") or {}
    return meta if isinstance(meta, dict) else {}


def entry_mac(secret: bytes, kind: str, key: str, digest: str) -> str:
    """HMAC-SHA256 with the run secret over (kind, key, tensors' digest): what binds an entry to its place."""
    return hmac.new(secret, json.dumps([kind, key, digest]).encode(), hashlib.sha256).hexdigest()


class TensorCache:
    """Tensors stored by content key as safetensors files (never pickles) with their SHA-256 in the file's
    metadata; writes are atomic, reads verified (a damaged entry is a miss, so it is computed again)."""

    def __init__(self, root: Path, secret: Callable[[], bytes | None] | None = None) -> None:
        self.root = Path(root)
        self.secret = secret or (lambda: None)
        """The run secret authenticating entries (HMAC over kind, key and digest); None: entries unauthenticated."""

    def path(self, kind: str, key: str) -> Path:
        return self.root / kind / f"{key}.safetensors"

    def get(self, kind: str, key: str) -> dict[str, torch.Tensor] | None:
        """The entry's tensors, or None when it is absent, unreadable, truncated or fails its digest (warned)."""
        from safetensors.torch import load

        return self._read(kind, key, load, tensors_sha256)

    def get_arrays(self, kind: str, key: str) -> dict[str, np.ndarray] | None:
        """``get`` as numpy arrays, verified the same way, without importing torch (an entry whose dtype numpy
        lacks, bfloat16 say, is unreadable here)."""
        from safetensors.numpy import load

        return self._read(kind, key, load, arrays_sha256)

    def _read(self, kind: str, key: str, load: Callable[[bytes], dict[str, Any]],
              digest: Callable[[dict[str, Any]], str]) -> dict[str, Any] | None:
        path = self.path(kind, key)
        if not path.exists() and not path.is_symlink():
            return None
        try:
            fd = open_regular(path, os.O_RDONLY)
            with os.fdopen(fd, "rb") as f:
                data = f.read()
            meta = _safetensors_metadata(data)
            expected = meta.get(DIGEST)
            tensors = load(data)
        except Exception as exc:  # noqa: BLE001 - any failure to read a cache file means: compute it again
            warn(f"{path}: unreadable cache entry ({type(exc).__name__}: {exc}); computing it again")
            return None
        if expected is None or digest(tensors) != expected:
            warn(f"{path}: cache entry fails its {DIGEST} check (corrupted or altered); computing it again")
            return None
        secret = self.secret()
        if secret is not None and not hmac.compare_digest(str(meta.get("mac", "")),
                                                          entry_mac(secret, kind, key, expected)):
            warn(f"{path}: cache entry not authenticated by this run's secret (moved or forged); computing it again")
            return None
        return tensors

    @contextlib.contextmanager
    def lock(self, kind: str, key: str) -> Iterator[None]:
        """Exclusive lock on one entry across processes, so concurrent workers train it once; a dead holder's
        lock is released by the operating system."""
        path = self.root / ".locks" / kind / f"{key}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def put(self, kind: str, key: str, tensors: dict[str, torch.Tensor]) -> None:
        from safetensors.torch import save_file

        flat = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
        digest = {DIGEST: tensors_sha256(flat)}
        secret = self.secret()
        if secret is not None:
            digest["mac"] = entry_mac(secret, kind, key, digest[DIGEST])
        _atomic_write(self.path(kind, key), lambda tmp: save_file(flat, tmp, metadata=digest))
