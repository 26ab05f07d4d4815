"""Attacks in their own process, holding nothing secret.

``run_attack(attack, view)`` runs ``attack.run`` in a process that never shared the game's memory: never a
``fork`` of the arena, which would copy its memory, membership labels, targets and run secret included, into the
child. On Linux it is forked from the arena's *fork server*: an interpreter exec'd (``subprocess``) from the arena
with the arena's environment less ``ARENA_RUN_SECRET``, its standard output discarded, working directory ``/``,
that imports torch, NumPy and the arena's own modules (``arena.*``, ``arena_plugins.*``: never a third party's, so
no plugin's code runs there) and otherwise only receives descriptors: per attack, the attack's pipe, a status
socket, and the arena's stdout and stderr. It never sees a view, a store or a secret, so neither does what it
forks; the fork only spares each attack the ~2.5 s of a fresh interpreter importing torch. The arena starts it on
first use, or with ``start()`` (the serial tournament, before forking its matchups, which share it); it exits
when every arena end of its socket is closed, killing what runs. Elsewhere, or with ``ARENA_SANDBOX_EXEC`` set,
each attack gets a fresh interpreter (``subprocess`` with exec) instead. Either way, the process then takes the
arena's current environment less the secret, import path, stdout and stderr, Python's, NumPy's and torch's
random states as a fresh interpreter has them, and everything below holds. What the child receives is built from
the view's granted items alone:

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
unpickled; it then cannot read the run directory (mode 0700), the secret (0600), the memory or environment of the
arena or of its parent (``/proc/<pid>/mem``, ``environ``: another user's), nor signal them. It dies with its
parent (``PR_SET_PDEATHSIG``); forked, it is killed by the fork server when its arena's end of the status socket
closes (the arena died, or gave up on it) and when the server exits; its other descriptors are all closed.

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
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import torch

from arena.contracts.release import BlackBox, LabelOnly, Models
from arena.games.membership.guess import MembershipGuess
from arena.games.reconstruction.guess import ReconstructionGuess

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
    from arena.run.procedure import TrainingProcedure

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
    env = _child_env()
    boot = pickle.dumps({"modules": modules, "payload": payload, "env": env,
                         "path": env["PYTHONPATH"].split(os.pathsep)})
    ours, theirs = socket.socketpair()
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        child = _fork_child(theirs, modules) or _exec_child(theirs, env)
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


def _exec_child(theirs: socket.socket, env: dict[str, str]) -> subprocess.Popen:
    """The attack's process as a fresh interpreter (where no fork server runs)."""
    return subprocess.Popen(
        [sys.executable, "-c", f"from arena.run.sandbox import _child_main; _child_main({theirs.fileno()})"],
        pass_fds=(theirs.fileno(),), env=env, cwd="/", stdin=subprocess.DEVNULL,
    )


# --- the fork server: an interpreter exec'd holding nothing secret, with the attack's usual imports done ---

PRELOAD = ("arena.contracts.view",)
"""Imported by the fork server before its first fork; after that it imports, before forking, the arena's own
modules (``arena.*``, ``arena_plugins.*``, never a third party's) that an attack's process is to import, so that
the next one starts with them done."""
_OWN_MODULE = re.compile(r"(arena|arena_plugins)(\.[A-Za-z_][A-Za-z0-9_]*)*")
_server_lock = threading.Lock()
_server: _Server | None = None
_NO_SERVER = False  # set in the fork server and the attack's processes, which start none


class _Server:
    """The arena's end of a fork server: a ``SOCK_SEQPACKET`` socket taking one message per attack (the attack's
    pipe, a status socket, the arena's stdout and stderr, as descriptors). Each message is whole, so processes
    forked from the arena (the serial tournament's) share it; answers come back on each attack's own status
    socket, never on this one."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            env = _child_env()
            self.process = subprocess.Popen(
                [sys.executable, "-c", f"from arena.run.sandbox import _server_main; _server_main({theirs.fileno()})"],
                pass_fds=(theirs.fileno(),), env=env, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            )
        finally:
            theirs.close()
        self.socket = ours

    def spawn(self, conn: socket.socket, modules: list[str]) -> _Forked:
        status, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        own = [m for m in modules if _OWN_MODULE.fullmatch(m)]
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            socket.send_fds(self.socket, [" ".join(["spawn", *own]).encode()], [conn.fileno(), theirs.fileno(), 1, 2])
        except BaseException:
            status.close()
            raise
        finally:
            theirs.close()
        return _Forked(status)


class _Forked:
    """The attack's process as the fork server made it, seen through its status socket (``subprocess.Popen``'s
    ``poll``, ``wait``, ``kill``, ``returncode``): the server kills it when asked or when this end closes, reaps
    it and sends its exit code (negative: the signal that killed it)."""

    def __init__(self, status: socket.socket) -> None:
        self.status = status
        self.returncode: int | None = None

    def _read(self, block: bool) -> int | None:
        if self.returncode is None:
            self.status.setblocking(block)
            try:
                data = self.status.recv(16)
            except (BlockingIOError, InterruptedError):
                return None
            except OSError:
                data = b""
            self.returncode = struct.unpack("<i", data)[0] if len(data) == 4 else -9  # no word: the monitor died
            self.status.close()
        return self.returncode

    def poll(self) -> int | None:
        return self._read(block=False)

    def wait(self) -> int:
        return self._read(block=True)  # type: ignore[return-value]

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(OSError):
                self.status.setblocking(True)
                self.status.send(b"k")


def _fork_child(theirs: socket.socket, modules: list[str]) -> _Forked | None:
    """The attack's process forked by this arena's fork server (started on first use); ``None`` where there is
    none (not Linux, ``ARENA_SANDBOX_EXEC`` set, or it cannot start), and a fresh interpreter is started instead."""
    global _server
    if not sys.platform.startswith("linux") or os.environ.get("ARENA_SANDBOX_EXEC") or _NO_SERVER:
        return None
    with _server_lock:
        for _ in range(2):
            try:
                if _server is None:
                    _server = _Server()
                return _server.spawn(theirs, modules)
            except OSError:  # it died (killed, or its arena's fork was left with a closed end): start another
                stale, _server = _server, None
                if stale is not None:
                    stale.socket.close()
    return None


def start() -> None:
    """Start this process's fork server now (it loads in the background): the processes forked from here (the
    serial tournament's matchups) then share it instead of each starting its own."""
    global _server
    if sys.platform.startswith("linux") and not os.environ.get("ARENA_SANDBOX_EXEC") and not _NO_SERVER:
        with _server_lock:
            if _server is None:
                with contextlib.suppress(OSError):
                    _server = _Server()


def _server_main(fd: int) -> None:
    """The fork server: import what attacks need, then fork the attack's process for each message, kill it when
    its arena asks or closes its status socket, reap it and send its exit code there; on the end of every arena
    end of the socket (the arena is gone), kill what runs and exit. It reads nothing but descriptors."""
    import select
    import signal

    global _NO_SERVER
    _NO_SERVER = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the arena's to handle; the attack still gets it
    ctl = socket.socket(fileno=fd)
    for module in PRELOAD:
        with contextlib.suppress(Exception):
            importlib.import_module(module)
    with contextlib.suppress(Exception):
        _warm_reachable()
    server = os.getpid()
    running: dict[int, tuple[socket.socket, int | None]] = {}  # pid: (status socket, pidfd)
    asked: set[int] = set()  # pids whose arena asked for (or went away before) their end
    while True:
        watch: list[Any] = [ctl]
        for pid, (status, pidfd) in running.items():
            watch += [status] if pid not in asked else []
            watch += [pidfd] if pidfd is not None else []
        polling = any(pidfd is None for _, pidfd in running.values())
        try:
            ready = set(select.select(watch, [], [], 0.02 if polling else None)[0])
        except InterruptedError:
            continue
        for pid, (status, pidfd) in list(running.items()):
            if status in ready:
                try:
                    word = status.recv(16)
                except OSError:
                    word = b""
                if not word:
                    asked.add(pid)
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if pidfd is None or pidfd in ready:
                done, st = os.waitpid(pid, os.WNOHANG)
                if done:
                    with contextlib.suppress(OSError):
                        status.send(struct.pack("<i", os.waitstatus_to_exitcode(st)))
                    status.close()
                    if pidfd is not None:
                        os.close(pidfd)
                    del running[pid]
                    asked.discard(pid)
        if ctl not in ready:
            continue
        try:
            message, fds, _, _ = socket.recv_fds(ctl, 1 << 16, 8)
        except OSError:
            message, fds = b"", []
        if not message and not fds:  # every arena end is closed: the arena is gone
            for pid in running:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            os._exit(0)
        words = message.decode(errors="replace").split()
        if words[:1] != ["spawn"] or len(fds) != 4:
            for f in fds:
                os.close(f)
            continue
        fresh = [m for m in words[1:] if _OWN_MODULE.fullmatch(m) and m not in sys.modules]
        for module in fresh:
            with contextlib.suppress(Exception):
                importlib.import_module(module)
        if fresh:
            with contextlib.suppress(Exception):
                _warm_reachable()
        conn, status_fd, out, err = fds
        pid = os.fork()
        if pid == 0:
            try:
                os.dup2(out, 1)
                os.dup2(err, 2)
                os.closerange(3, conn)
                os.closerange(conn + 1, 1 << 16)  # the server's socket and every other attack's status
                signal.signal(signal.SIGINT, signal.default_int_handler)
                _child_main(conn, parent=server)  # exits
            finally:
                os._exit(1)
        for f in (conn, out, err):
            os.close(f)
        try:
            pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pidfd = None
        running[pid] = (socket.socket(fileno=status_fd), pidfd)


def _serve(conn: Connection, child: Any, handles: dict[str, Any], guesses: tuple[type, ...],
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


def _warm_reachable() -> None:
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


def _child_main(fd: int, *, parent: int | None = None) -> None:
    """Entry point of the attack's process: a fresh interpreter, or forked by the fork server (its ``parent``)."""
    global _NO_SERVER
    _NO_SERVER = True  # an attack that forks starts no fork server
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
