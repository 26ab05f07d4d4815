"""Attacks in their own process, holding nothing secret.

``run_attack(attack, view)`` runs ``attack.run`` in a fresh interpreter (``subprocess`` with exec, never
``fork``, which would copy the game's memory, membership labels and targets included, into the child). What the
child receives is built from the view's granted items alone:

* plain values: tensors, arrays, numbers, strings, tuples, ``None``, and ``Models`` (only where a view grants
  them, i.e. the ``parameters`` capability);
* for a query interface (``BlackBox``, capability ``query``) a proxy whose ``predict_proba``, ``log_proba`` and
  ``loss`` send their tensors over a pipe to this process, which answers from the released model: the child
  holds no parameter;
* for a label-only interface (``labels``) a proxy answering ``predict`` (argmax labels) the same way;
* for the training procedure (``training``) a proxy: calling it, or its ``train_chunks``, trains in this process
  (through the run's cache) and returns the trained ``Models``; it carries the procedure's public description
  (``defense``, ``arch``, ``recipe``, ``solver``, ``device``, ``chunk``), never the cache or any path.

Anything else in a view is refused (``TypeError``) rather than sent. The child's environment lacks
``ARENA_RUN_SECRET``; its only open descriptors are the pipe and the standard streams; its working directory is
``/``. Run as root, it imports the modules it needs (the attack's, the view's, the model's and the defense's)
and then drops to the user ``nobody`` (no supplementary groups) before the attack object and its view are
unpickled; it then cannot read the run directory (mode 0700), the secret (0600), the parent's memory or
environment (``/proc/<pid>/mem``, ``environ``: another user's), nor signal the parent. It dies with its parent
(``PR_SET_PDEATHSIG``).

What comes back from the child is never unpickled: every message is a JSON header and raw tensor bytes, and the
guess is rebuilt only as one of the allowed guess classes. An exception, ``sys.exit``, ``os._exit``, a signal
or a timeout in the child is raised here as ``AttackFailed``, which fails the matchup.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
import pickle
import socket
import struct
import subprocess
import sys
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import torch

from arena.attack import MembershipGuess, ReconstructionGuess
from arena.release import BlackBox, LabelOnly, Models

SECRET_ENV = "ARENA_RUN_SECRET"
SANDBOX_USER = "nobody"
GUESSES: tuple[type, ...] = (MembershipGuess, ReconstructionGuess)
_DTYPES = {str(d): d for d in (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8,
                               torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool)}
_PLAIN = (int, float, str, bool, bytes, type(None), np.integer, np.floating, np.bool_)
_QUERY_METHODS = frozenset({"predict_proba", "log_proba", "loss"})
_TRAIN_ATTRS = ("defense", "arch", "recipe", "solver", "device", "chunk")


class AttackFailed(Exception):  # noqa: N818 - reads as what happened to the matchup
    """The attack's process raised, exited, was killed or ran out of time; ``child_traceback`` is its traceback
    when it raised."""

    def __init__(self, message: str, child_traceback: str | None = None) -> None:
        super().__init__(message)
        self.child_traceback = child_traceback


# --- the wire: JSON header + raw tensor bytes, both ways; pickles only from parent to child ---


def _tensor(value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().contiguous()
    array = np.asarray(value)
    if array.dtype == object or array.dtype.kind in "USV":
        raise TypeError(f"cannot send an array of dtype {array.dtype}: numbers only")
    return torch.from_numpy(np.ascontiguousarray(array.astype(array.dtype.newbyteorder("=")))).contiguous()


def encode(header: dict[str, Any], tensors: dict[str, Any]) -> bytes:
    """One message: a length-prefixed JSON header naming each tensor's dtype and shape, then their bytes."""
    specs, blobs = [], []
    for name, value in tensors.items():
        t = _tensor(value)
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        specs.append([name, str(t.dtype), list(t.shape), len(raw)])
        blobs.append(raw)
    head = json.dumps({**header, "tensors": specs}).encode()
    return struct.pack("<I", len(head)) + head + b"".join(blobs)


def decode(message: bytes) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The header and tensors of ``encode``'s message; ``ValueError`` for anything malformed (no code runs)."""
    (size,) = struct.unpack_from("<I", message)
    header = json.loads(message[4 : 4 + size].decode())
    if not isinstance(header, dict):
        raise ValueError("malformed message")
    tensors, offset = {}, 4 + size
    for name, dtype, shape, nbytes in header.pop("tensors", []):
        if dtype not in _DTYPES or not all(isinstance(s, int) and s >= 0 for s in shape):
            raise ValueError(f"malformed tensor {name!r}")
        raw = bytearray(message[offset : offset + nbytes])
        offset += nbytes
        flat = torch.frombuffer(raw, dtype=_DTYPES[dtype]) if nbytes else torch.empty(0, dtype=_DTYPES[dtype])
        tensors[str(name)] = flat.reshape(shape)
    return header, tensors


# --- the parent's side ---


@dataclasses.dataclass
class _Remote:
    """A proxy's description: ``kind`` (query, labels, training) and public attributes."""

    kind: str
    attrs: dict[str, Any] = dataclasses.field(default_factory=dict)


def _is_procedure(value: Any) -> bool:
    from arena.procedure import TrainingProcedure

    return isinstance(value, TrainingProcedure)


def _split_view(view: Any) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """(what the child gets per item, the parent's objects behind each proxy, modules the child must import).
    Lists, tuples and dicts are walked (a proxy inside one is named ``item.index``); anything not plain data nor
    a known interface is refused with ``TypeError``."""
    handles: dict[str, Any] = {}
    modules = {type(view).__module__}

    def wrap(name: str, value: Any) -> Any:
        if isinstance(value, BlackBox):
            handles[name] = value
            return _Remote("query", {"handle": name})
        if type(value) is LabelOnly:
            handles[name] = value
            return _Remote("labels", {"handle": name})
        if _is_procedure(value):
            handles[name] = value
            modules.update({type(value.defense).__module__, type(value.arch.model).__module__})
            return _Remote("training", {"handle": name, **{a: getattr(value, a) for a in _TRAIN_ATTRS}})
        if isinstance(value, Models):
            modules.add(type(value.arch.model).__module__)
            return value
        if isinstance(value, (torch.Tensor, np.ndarray, *_PLAIN)):
            return value
        if isinstance(value, (tuple, list)):
            return type(value)(wrap(f"{name}.{i}", v) for i, v in enumerate(value))
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return {k: wrap(f"{name}.{k}", v) for k, v in value.items()}
        raise TypeError(f"view item {name!r} ({type(value).__name__}) cannot be handed to an attack's process")

    items = object.__getattribute__(view, "_items")
    send = {name: wrap(name, value) for name, value in items.items()}
    return send, handles, sorted(modules)


def guess_types(game: Any) -> tuple[type, ...]:
    """The guess classes an attack of ``game`` may return: the built-in ones and the dataclasses defined in the
    game's module (looked up in modules already imported, never imported on the child's say)."""
    module = sys.modules.get(type(game).__module__)
    own = [v for v in vars(module).values() if isinstance(v, type) and dataclasses.is_dataclass(v)
           and v.__module__ == module.__name__] if module else []
    return (*GUESSES, *own)


def _answer(handles: dict[str, Any], header: dict[str, Any], tensors: dict[str, torch.Tensor]) -> Any:
    """Serve one request of the child from the object behind its proxy."""
    target = handles.get(header.get("handle"))
    method = header.get("method")
    if isinstance(target, BlackBox) and method in _QUERY_METHODS:
        args = [tensors["X"]] + ([tensors["y"]] if method == "loss" else [])
        return getattr(target, method)(*args)
    if type(target) is LabelOnly and method == "predict":
        return target.predict(tensors["X"])
    if target is not None and _is_procedure(target) and method == "__call__":
        return target(tensors["X"], tensors["y"], tensors["init"], tensors["train"])
    if target is not None and _is_procedure(target) and method == "train_chunks":
        n = int(header.get("n", 0))
        return target.train_chunks([tuple(tensors[f"{i}.{k}"] for k in ("X", "y", "init", "train"))
                                    for i in range(n)])
    raise ValueError(f"the sandbox does not answer {method!r} on {header.get('handle')!r}")


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != SECRET_ENV}
    env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) if p else os.getcwd() for p in sys.path)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_attack(attack: Any, view: Any, *, timeout: float | None = None,
               guesses: tuple[type, ...] = GUESSES) -> Any:
    """``attack.run(view)`` in a separate, unprivileged process holding only the view; its guess, rebuilt as one
    of ``guesses``. ``AttackFailed`` when the attack raises, exits, dies or outlives ``timeout`` seconds."""
    send, handles, modules = _split_view(view)
    modules = sorted({*modules, type(attack).__module__, *(g.__module__ for g in guesses)})
    payload = pickle.dumps({
        "view": (type(view), object.__getattribute__(view, "_attack"), send,
                 object.__getattribute__(view, "_withheld")),
        "attack": attack,
    })
    boot = pickle.dumps({"modules": modules, "payload": payload})
    ours, theirs = socket.socketpair()
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        child = subprocess.Popen(
            [sys.executable, "-c", f"from arena.sandbox import _child_main; _child_main({theirs.fileno()})"],
            pass_fds=(theirs.fileno(),), env=_child_env(), cwd="/", stdin=subprocess.DEVNULL,
        )
    finally:
        theirs.close()
    conn = Connection(ours.detach())
    try:
        conn.send_bytes(boot)
        return _serve(conn, child, handles, guesses, deadline, getattr(attack, "name", type(attack).__name__))
    finally:
        conn.close()
        if child.poll() is None:
            child.kill()
        child.wait()


def _serve(conn: Connection, child: subprocess.Popen, handles: dict[str, Any], guesses: tuple[type, ...],
           deadline: float | None, name: str) -> Any:
    while True:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            ready = conn.poll(wait)
            message = conn.recv_bytes() if ready else None
        except (EOFError, OSError):
            child.wait()
            raise AttackFailed(f"worker died: exit code {child.returncode}") from None  # as Ray and --serial say
        if message is None:
            child.kill()
            raise AttackFailed(f"attack {name!r}: timeout: no guess in time")
        try:
            header, tensors = decode(message)
        except Exception as exc:  # noqa: BLE001 - whatever the child sent, it is its failure
            raise AttackFailed(f"attack {name!r}: its process sent a malformed message ({exc})") from None
        op = header.get("op")
        if op == "error":  # as an in-process plugin failure reads: a BaseException that is no Exception is named
            prefix = "" if header.get("exception") else "plugin raised "
            raise AttackFailed(f"{prefix}{header.get('type')}: {header.get('message')}", header.get("traceback"))
        if op == "result":
            try:
                return _guess(header, tensors, guesses, name)
            except (KeyError, TypeError, ValueError) as exc:
                raise AttackFailed(f"attack {name!r}: malformed guess ({type(exc).__name__}: {exc})") from None
        try:
            reply: tuple[str, Any] = ("ok", _answer(handles, header, tensors))
        except Exception as exc:  # noqa: BLE001 - a bad request is the attack's error, raised in the child
            reply = ("error", f"{type(exc).__name__}: {exc}")
        conn.send_bytes(pickle.dumps(reply))


def _guess(header: dict[str, Any], tensors: dict[str, torch.Tensor], guesses: tuple[type, ...], name: str) -> Any:
    kinds = {g.__name__: g for g in guesses}
    cls = kinds.get(header.get("type"))
    if cls is None:
        raise AttackFailed(f"attack {name!r} returned {header.get('type')}, not one of {', '.join(kinds)}")
    fields: dict[str, Any] = {}
    dicts = header.get("dicts") or {}
    for f in dataclasses.fields(cls):
        if f.name in dicts:
            fields[f.name] = {str(k): tensors[f"{f.name}.{k}"].numpy() for k in dicts[f.name]}
        elif f.name in tensors:
            fields[f.name] = tensors[f.name].numpy()
        elif f.name in header.get("plain", {}):
            fields[f.name] = header["plain"][f.name]
    return cls(**fields)


# --- the child's side ---


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
        from arena.games.view import ThreatModelError

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

    __slots__ = ("defense", "arch", "recipe", "solver", "device", "chunk")
    _offers = ("__call__", "train_chunks", *_TRAIN_ATTRS)

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


def _reachable(path: str) -> bool:
    """Whether a user who is neither owner nor in the group can list ``path`` (every ancestor searchable)."""
    import stat

    try:
        parts = [os.path.abspath(path)]
        while parts[-1] != os.path.dirname(parts[-1]):
            parts.append(os.path.dirname(parts[-1]))
        for i, p in enumerate(parts):
            mode = os.stat(p).st_mode
            if not mode & stat.S_IXOTH or (i == 0 and not mode & stat.S_IROTH):
                return False
    except OSError:
        return True  # absent: nothing to keep open
    return True


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


def _child_main(fd: int) -> None:
    """Entry point of the attack's process."""
    parent = os.getppid()
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
        for module in boot["modules"]:
            importlib.import_module(module)
        if os.geteuid() == 0:
            keep_code_reachable()
        drop_privileges()
        _die_with_parent(parent)
        torch.set_num_threads(1)
        data = pickle.loads(boot["payload"])
        view_cls, attack_name, send, withheld = data["view"]

        def unwrap(value: Any) -> Any:
            if isinstance(value, _Remote):
                attrs = dict(value.attrs)
                handle = attrs.pop("handle")
                if value.kind == "training":
                    return TrainingProxy(conn, handle, attrs)
                return {"query": QueryProxy, "labels": LabelProxy}[value.kind](conn, handle)
            if isinstance(value, (tuple, list)):
                return type(value)(unwrap(v) for v in value)
            if isinstance(value, dict):
                return {k: unwrap(v) for k, v in value.items()}
            return value

        items = {name: unwrap(value) for name, value in send.items()}
        view = object.__new__(view_cls)
        object.__setattr__(view, "_attack", attack_name)
        object.__setattr__(view, "_items", items)
        object.__setattr__(view, "_withheld", withheld)
        guess = data["attack"].run(view)
        if dataclasses.is_dataclass(guess) and not isinstance(guess, type):
            tensors, plain, dicts = {}, {}, {}
            for f in dataclasses.fields(guess):
                v = getattr(guess, f.name)
                if v is None or isinstance(v, (int, float, str, bool)):
                    plain[f.name] = v
                elif isinstance(v, dict):
                    dicts[f.name] = [str(k) for k in v]
                    tensors.update({f"{f.name}.{k}": a for k, a in v.items()})
                else:
                    tensors[f.name] = v
            message = encode({"op": "result", "type": type(guess).__name__, "plain": plain, "dicts": dicts},
                             tensors)
        else:
            message = encode({"op": "result", "type": type(guess).__name__, "plain": {}}, {})
    except BaseException as exc:  # noqa: BLE001 - sys.exit, KeyboardInterrupt: all the attack's failure
        fail(exc)
    else:
        with contextlib.suppress(BaseException):
            conn.send_bytes(message)
    with contextlib.suppress(BaseException):
        conn.close()
    sys.stdout.flush()
    os._exit(0)
