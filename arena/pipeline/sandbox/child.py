"""The attack's process: what runs there, from the boot message to the guess sent back.

``main`` receives the boot message (the modules to import, the environment and import path a fresh interpreter
would have, the pickled attack and view), imports the modules, keeps the import directories that ``nobody``
could not reach open (``keep_code_reachable``), drops to the user ``nobody`` when run as root
(``drop_privileges``), dies with its parent, and only then unpickles the attack and its view, whose interfaces
become proxies (``QueryProxy``, ``LabelProxy``, ``TrainingProxy``) that send every call over the pipe to the
arena. It runs the attack and sends back its guess, or its failure, as a JSON header and raw tensors
(``arena.pipeline.sandbox.wire``), then exits.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pickle
import sys
import traceback
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import torch

from arena.contracts.release import Models
from arena.pipeline.sandbox.wire import TRAIN_ATTRS, Remote, encode, guess_message

SANDBOX_USER = "nobody"
_ATTACK_PROCESS = False  # set in an attack's process: it starts no fork server (arena.pipeline.sandbox.server)


def in_attack_process() -> bool:
    """Whether this process is an attack's (forked from it or not): an attack that runs attacks itself gets a
    fresh interpreter for each, never a fork server of its own."""
    return _ATTACK_PROCESS


class _Proxy:
    """Sends each call over the pipe; holds the pipe and a name, nothing else."""

    __slots__ = ("_conn", "_handle")
    _offers: tuple[str, ...] = ()

    def __init__(self, conn: Connection, handle: str) -> None:
        object.__setattr__(self, "_conn", conn)
        object.__setattr__(self, "_handle", handle)

    def _call(self, method: str, tensors: dict[str, Any], **extra: Any) -> Any:
        conn = object.__getattribute__(self, "_conn")
        conn.send_bytes(encode({"op": "call", "handle": object.__getattribute__(self, "_handle"),
                                "method": method, **extra}, tensors))
        status, value = pickle.loads(conn.recv_bytes())
        if status == "error":
            raise RuntimeError(value)
        return value

    def __getattr__(self, name: str) -> Any:
        from arena.contracts.view import ThreatModelError

        raise ThreatModelError(f"{type(self).__name__} answers {', '.join(self._offers)} only, not {name!r}: "
                               "nothing else of the model is in the attack's process")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a sandboxed interface is read-only")


class QueryProxy(_Proxy):
    """Query access to the released model: every call is answered by the arena's process."""

    __slots__ = ()
    _offers = ("predict_proba", "log_proba", "loss")

    def predict_proba(self, X: torch.Tensor) -> torch.Tensor:
        return self._call("predict_proba", {"X": X})

    def log_proba(self, X: torch.Tensor) -> torch.Tensor:
        return self._call("log_proba", {"X": X})

    def loss(self, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self._call("loss", {"X": X, "y": y})


class LabelProxy(_Proxy):
    """Label-only access: predicted labels, answered by the arena's process."""

    __slots__ = ()
    _offers = ("predict",)

    def predict(self, X: torch.Tensor) -> torch.Tensor:
        return self._call("predict", {"X": X})


class TrainingProxy(_Proxy):
    """The target's training procedure: trains in the arena's process, returns the attacker's own models."""

    __slots__ = TRAIN_ATTRS
    _offers = ("__call__", "train_chunks", *TRAIN_ATTRS)

    def __init__(self, conn: Connection, handle: str, attrs: dict[str, Any]) -> None:
        super().__init__(conn, handle)
        for k, v in attrs.items():
            object.__setattr__(self, k, v)

    def __call__(self, X: torch.Tensor, y: torch.Tensor, init_seeds: Any, train_seeds: Any) -> Any:
        return self._call("__call__", {"X": X, "y": y, "init": torch.as_tensor(init_seeds, dtype=torch.int64),
                                       "train": torch.as_tensor(train_seeds, dtype=torch.int64)})

    def train_chunks(self, chunks: Any) -> list[Models]:
        tensors = {}
        for i, (X, y, init, train) in enumerate(chunks):
            tensors.update({f"{i}.X": X, f"{i}.y": y, f"{i}.init": torch.as_tensor(init, dtype=torch.int64),
                            f"{i}.train": torch.as_tensor(train, dtype=torch.int64)})
        return self._call("train_chunks", tensors, n=len(chunks))


# --- the import directories that stay reachable after the user change ---

_REACHABLE: dict[str, bool] = {}
_SEARCHABLE: dict[str, bool] = {}


def _searchable(path: str) -> bool:
    """Whether others may search ``path`` and each of its ancestors (remembered: the fork server's answers serve
    every attack's process)."""
    known = _SEARCHABLE.get(path)
    if known is None:
        import stat

        parent = os.path.dirname(path)
        known = bool(os.stat(path).st_mode & stat.S_IXOTH) and (parent == path or _searchable(parent))
        _SEARCHABLE[path] = known
    return known


def _reachable(path: str) -> bool:
    """Whether a user who is neither owner nor in the group can list ``path`` (every ancestor searchable)."""
    import stat

    path = os.path.abspath(path)
    known = _REACHABLE.get(path)
    if known is None:
        try:
            known = bool(os.stat(path).st_mode & stat.S_IROTH) and _searchable(path)
        except OSError:
            return True  # absent: nothing to keep open
        _REACHABLE[path] = known
    return known


def warm_reachable() -> None:
    """In the fork server: answer ``_reachable`` for every import directory known so far."""
    paths = list(sys.path)
    for module in list(sys.modules.values()):
        search = getattr(module, "__path__", None)
        if isinstance(search, list):
            paths += search
    for path in paths:
        if isinstance(path, str) and path:
            _reachable(path)


def keep_code_reachable() -> int:
    """Before the user change: every import directory (``sys.path``, packages' ``__path__``) that ``nobody`` could
    not reach (e.g. an interpreter under /root, a plugin in a private temporary directory) is opened as a
    directory descriptor and named ``/proc/self/fd/N`` from then on, so that imports keep working. Only code
    directories are opened, never the run directory. Returns how many were opened."""
    opened: dict[str, str] = {}

    def route(path: str) -> str:
        if not isinstance(path, str) or not path or _reachable(path):
            return path
        for root, alias in opened.items():
            if path == root or path.startswith(root + os.sep):
                return alias + path[len(root):]
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return path
        opened[os.path.abspath(path)] = f"/proc/self/fd/{fd}"
        return opened[os.path.abspath(path)]

    sys.path[:] = [route(p) for p in sys.path]
    for module in list(sys.modules.values()):
        search = getattr(module, "__path__", None)
        if isinstance(search, list):
            search[:] = [route(p) for p in search]
    sys.path_importer_cache.clear()
    return len(opened)


# --- becoming the attack's process ---


def drop_privileges() -> str:
    """Become ``nobody`` (no supplementary groups) when running as root; say what isolation holds."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "same user as the arena (not root: no user to drop to)"
    import pwd

    try:
        user = pwd.getpwnam(SANDBOX_USER)
    except KeyError:
        return f"root (no user {SANDBOX_USER!r} on this system)"
    os.setgroups([])
    os.setgid(user.pw_gid)
    os.setuid(user.pw_uid)
    return f"user {SANDBOX_USER} ({user.pw_uid})"


def _die_with_parent(parent: int) -> None:
    """Linux: SIGKILL this process when its parent dies (set after the user change, which clears it)."""
    with contextlib.suppress(Exception):
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def _forked_as(env: dict[str, str], path: list[str]) -> None:
    """In a process forked by the fork server: the environment and import path a fresh interpreter would have had
    (the arena's now, without the secret), no cached import lookups or plugin registries, and the random states
    of a fresh interpreter (Python's and NumPy's from the system's entropy, torch's at its default seed)."""
    import random

    os.environ.clear()
    os.environ.update(env)
    sys.path[:] = path
    sys.dont_write_bytecode = True
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    plugins = sys.modules.get("arena.plugins")
    if plugins is not None:
        plugins.registries.cache_clear()
    random.seed()
    np.random.seed()
    torch.manual_seed(torch.initial_seed())


def _unwrap(conn: Connection, value: Any) -> Any:
    """A view item as the attack gets it: each ``Remote`` (inside lists, tuples and dicts too) as its proxy."""
    if isinstance(value, Remote):
        attrs = dict(value.attrs)
        handle = attrs.pop("handle")
        if value.kind == "training":
            return TrainingProxy(conn, handle, attrs)
        return {"query": QueryProxy, "labels": LabelProxy}[value.kind](conn, handle)
    if isinstance(value, (tuple, list)):
        return type(value)(_unwrap(conn, v) for v in value)
    if isinstance(value, dict):
        return {k: _unwrap(conn, v) for k, v in value.items()}
    return value


def main(fd: int, *, parent: int | None = None) -> None:
    """Entry point of the attack's process: a fresh interpreter, or forked by the fork server (its ``parent``)."""
    global _ATTACK_PROCESS
    _ATTACK_PROCESS = True  # an attack that forks starts no fork server
    forked = parent is not None
    parent = os.getppid() if parent is None else parent
    conn = Connection(fd)

    def fail(exc: BaseException) -> None:
        try:
            text = str(exc)
        except BaseException:  # noqa: BLE001 - a hostile __str__
            text = "(unprintable)"
        with contextlib.suppress(BaseException):
            conn.send_bytes(encode({"op": "error", "type": type(exc).__name__, "message": text,
                                    "exception": isinstance(exc, Exception), "traceback": traceback.format_exc()},
                                   {}))

    try:
        boot = pickle.loads(conn.recv_bytes())  # from the arena: trusted; the payload stays bytes for now
        if forked:
            _forked_as(boot["env"], boot["path"])
        for module in boot["modules"]:
            importlib.import_module(module)
        if os.geteuid() == 0:
            keep_code_reachable()
        drop_privileges()
        _die_with_parent(parent)
        torch.set_num_threads(1)
        data = pickle.loads(boot["payload"])
        view_cls, attack_name, send, withheld = data["view"]
        items = {name: _unwrap(conn, value) for name, value in send.items()}
        view = object.__new__(view_cls)
        object.__setattr__(view, "_attack", attack_name)
        object.__setattr__(view, "_items", items)
        object.__setattr__(view, "_withheld", withheld)
        message = guess_message(data["attack"].run(view))
    except BaseException as exc:  # noqa: BLE001 - sys.exit, KeyboardInterrupt: all the attack's failure
        fail(exc)
    else:
        with contextlib.suppress(BaseException):
            conn.send_bytes(message)
    with contextlib.suppress(BaseException):
        conn.close()
    sys.stdout.flush()
    os._exit(0)
