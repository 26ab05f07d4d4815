"""The run directory: results.jsonl (appended atomically, torn tail ignored), content-addressed tensor cache."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

RESULTS = "results.jsonl"


def content_key(obj: object) -> str:
    """Stable hash of a JSON-serialisable description (keys sorted)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def tensor_digest(*tensors: torch.Tensor | np.ndarray) -> str:
    """Hash of tensor contents, shapes and dtypes."""
    h = hashlib.sha256()
    for t in tensors:
        a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:24]


def _atomic_write(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class TensorCache:
    """Tensors stored by content key as safetensors files (never pickles); writes are atomic."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, kind: str, key: str) -> Path:
        return self.root / kind / f"{key}.safetensors"

    def get(self, kind: str, key: str) -> dict[str, torch.Tensor] | None:
        path = self.path(kind, key)
        if not path.exists():
            return None
        return load_file(str(path))

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
        flat = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
        _atomic_write(self.path(kind, key), lambda tmp: save_file(flat, tmp))


class RunStore:
    """One run directory: the scenario as run, results.jsonl, the cache and per-matchup artifacts."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.cache = TensorCache(self.root / "cache")
        self.artifacts = TensorCache(self.root / "artifacts")

    @property
    def results_path(self) -> Path:
        return self.root / RESULTS

    def artifact_dir(self, key: str) -> Path:
        return self.root / "artifacts" / key

    def save_arrays(self, key: str, arrays: dict[str, torch.Tensor]) -> None:
        """Keep one matchup's arrays (scores and membership, targets and reconstructions) outside the model cache,
        so nothing reachable from an attacker's training procedure holds another matchup's secret."""
        self.artifacts.put(key, "arrays", arrays)

    def load_arrays(self, key: str) -> dict[str, torch.Tensor] | None:
        return self.artifacts.get(key, "arrays")

    def write_json(self, name: str, obj: object) -> None:
        text = json.dumps(obj, indent=2, sort_keys=True, default=str)
        _atomic_write(self.root / name, lambda tmp: Path(tmp).write_text(text))

    def write_text(self, name: str, text: str) -> None:
        _atomic_write(self.root / name, lambda tmp: Path(tmp).write_text(text))

    def append_result(self, row: dict) -> None:
        """Append one finished matchup as a single line, flushed and fsynced before returning."""
        self.root.mkdir(parents=True, exist_ok=True)
        line = json.dumps(row, sort_keys=True, default=str) + "\n"
        self._repair_tail()
        with open(self.results_path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def _repair_tail(self) -> None:
        """Drop a torn last line (a kill during a write) so the next append starts on a fresh line."""
        path = self.results_path
        if not path.exists() or path.stat().st_size == 0:
            return
        data = path.read_bytes()
        if data.endswith(b"\n"):
            return
        cut = data.rfind(b"\n") + 1
        with open(path, "r+b") as f:
            f.truncate(cut)

    def results(self) -> list[dict]:
        """Every complete result row; a torn or unparsable last line is ignored."""
        if not self.results_path.exists():
            return []
        rows = []
        lines = self.results_path.read_text(encoding="utf-8").split("\n")
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                if i < len(lines) - 1 and any(x.strip() for x in lines[i + 1 :]):
                    raise ValueError(f"{self.results_path}: line {i + 1} is corrupt") from None
        return rows
