"""The arena's side of the sandbox: the attack's process started and ended, what it is given, what it may ask.

``AttackProcess`` starts the attack's process (``arena.pipeline.sandbox.server.launch``) from an ``AttackRef``
alone (name, class entry, parameters as JSON): the attack is imported, validated, built and asked
``skip_reason`` there (``skip_reason()`` here waits for its answer), never in the arena. ``run(view)`` hands it
what the view grants (``_split_view``): plain values, ``Models`` where a view grants them, and for each interface
a ``Remote`` that the child turns into a proxy; anything else is refused (``TypeError``) before it is sent. It
then serves the process: each call of a proxy is answered from the object behind it (``_answer``: ``BlackBox``
queries, ``LabelOnly`` labels, training through the run's cache), within the quotas (``limits``), until the guess
comes back, rebuilt only as a class the game allows (``guess_types``). Its standard output and error come
through a pipe of their own and are relayed to the arena's standard error (``_Relay``): each line prefixed with
the attack's name, control characters escaped, at most ``output_bytes`` per matchup. A failure of the attack's
process, a refusal or a timeout is raised as ``AttackFailed`` (message and traceback capped and escaped); the
death of the fork server under it as ``ServerDied``, which is the arena's fault, not the attack's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import select
import socket
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import torch

from arena import trust
from arena.contracts.release import BlackBox, LabelOnly, Models
from arena.pipeline.sandbox import server
from arena.pipeline.sandbox.limits import ARTIFACT_CHARS, ERROR_CHARS, TRACEBACK_CHARS, Limits, clip_text, printable
from arena.pipeline.sandbox.static import AttackRef, attack_ref
from arena.pipeline.sandbox.wire import TRAIN_ATTRS, Remote, decode, guess_fields

_PLAIN = (int, float, str, bool, bytes, type(None), np.integer, np.floating, np.bool_)
_QUERY_METHODS = frozenset({"predict_proba", "log_proba", "loss"})
MIN_QUERY_ROWS = 1 << 16
MIN_TRAIN_UNITS = 1 << 24


class AttackFailed(Exception):  # noqa: N818 - reads as what happened to the matchup
    """The attack's process raised, exited, was killed, was refused or ran out of time. ``child_traceback`` is its
    traceback when it raised; both are capped and printable (``full_text``: the longer original, itself capped at
    ``ARTIFACT_CHARS``, where something was cut)."""

    def __init__(self, message: str, child_traceback: str | None = None, full_text: str | None = None) -> None:
        super().__init__(message)
        self.child_traceback = child_traceback
        self.full_text = full_text


class ServerDied(Exception):  # noqa: N818
    """The fork server died while the attack's process ran: no fault of the attack (the matchup is played again,
    as after a worker's death)."""


def guess_types(game: Any = None) -> tuple[type, ...]:
    """The guess classes an attack of ``game`` (a game or its class) may return: the ``Guess`` the game declares;
    for a game that declares none, the dataclasses defined in its module (looked up in modules already imported,
    never imported on the child's say). Without a game: the guess of every registered game."""
    if game is None:
        from arena.plugins import registries

        return tuple(dict.fromkeys(g for entry in registries().games for g in guess_types(entry.obj)))
    cls = game if isinstance(game, type) else type(game)
    declared = getattr(cls, "Guess", object)
    if dataclasses.is_dataclass(declared):
        return (declared,)
    module = sys.modules.get(cls.__module__)
    return tuple(v for v in vars(module).values() if isinstance(v, type) and dataclasses.is_dataclass(v)
                 and v.__module__ == module.__name__) if module else ()


def _is_procedure(value: Any) -> bool:
    from arena.pipeline.procedure import TrainingProcedure

    return isinstance(value, TrainingProcedure)


def _split_view(view: Any) -> tuple[dict[str, Any], dict[str, Any], int]:
    """(what the child gets per item, the parent's objects behind each proxy, the most rows of any tensor in it).
    Lists, tuples and dicts are walked (a proxy inside one is named ``item.index``); anything not plain data nor
    a known interface is refused with ``TypeError``."""
    handles: dict[str, Any] = {}
    rows = [0]

    def wrap(name: str, value: Any) -> Any:
        if isinstance(value, BlackBox):
            handles[name] = value
            return Remote("query", {"handle": name})
        if type(value) is LabelOnly:
            handles[name] = value
            return Remote("labels", {"handle": name})
        if _is_procedure(value):
            handles[name] = value
            return Remote("training", {"handle": name, **{a: getattr(value, a) for a in TRAIN_ATTRS}})
        if isinstance(value, Models):
            return value
        if isinstance(value, (torch.Tensor, np.ndarray)):
            rows[0] = max(rows[0], int(value.shape[0]) if value.ndim else 1)
            return value
        if isinstance(value, _PLAIN):
            return value
        if isinstance(value, (tuple, list)):
            return type(value)(wrap(f"{name}.{i}", v) for i, v in enumerate(value))
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return {k: wrap(f"{name}.{k}", v) for k, v in value.items()}
        raise TypeError(f"view item {name!r} ({type(value).__name__}) cannot be handed to an attack's process")

    items = object.__getattribute__(view, "_items")
    send = {name: wrap(name, value) for name, value in items.items()}
    return send, handles, rows[0]


class _Relay(threading.Thread):
    """Copies the attack's standard output and error (one pipe) to this process's standard error: each line
    prefixed ``[name]``, control characters escaped, at most ``limit`` bytes, then one line saying what was cut;
    the rest is read and dropped, so the attack never blocks on a full pipe."""

    def __init__(self, fd: int, name: str, limit: int) -> None:
        super().__init__(daemon=True, name=f"arena-relay-{name}")
        self.fd, self.name, self.limit = fd, printable(name), limit
        self.done = threading.Event()
        self.seen = 0

    def _emit(self, data: bytes) -> None:
        text = data.decode("utf-8", errors="backslashreplace")
        lines = "".join(f"[{self.name}] {printable(line)}\n" for line in text.split("\n"))
        with contextlib.suppress(Exception):
            sys.stderr.write(lines)
            sys.stderr.flush()

    def run(self) -> None:
        pending = b""
        while True:
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if not ready:
                if self.done.is_set():
                    break
                continue
            try:
                chunk = os.read(self.fd, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            kept = chunk[: max(self.limit - self.seen, 0)]
            self.seen += len(chunk)
            pending += kept
            if b"\n" in pending or len(pending) > 4096:
                head, sep, pending = pending.rpartition(b"\n") if b"\n" in pending else (pending, b"", b"")
                self._emit(head)
        if pending:
            self._emit(pending)
        if self.seen > self.limit:
            self._emit(f"[truncated: {self.seen - self.limit} more bytes of output not shown]".encode())
        with contextlib.suppress(OSError):
            os.close(self.fd)


def _failure(header: dict[str, Any]) -> AttackFailed:
    """The child's error message as the arena keeps it: capped, printable, the long original beside it."""
    prefix = "" if header.get("exception") else "plugin raised "  # a BaseException that is no Exception is named
    text = f"{prefix}{header.get('type')}: {header.get('message')}"
    trace = header.get("traceback")
    trace = trace if isinstance(trace, str) else None
    message = clip_text(text, ERROR_CHARS)
    kept = None if trace is None else clip_text(trace, TRACEBACK_CHARS, tail=True)
    long = len(text) > ERROR_CHARS or (trace is not None and len(trace) > TRACEBACK_CHARS)
    full = clip_text(f"{text}\n\n{trace or ''}", ARTIFACT_CHARS) if long else None
    return AttackFailed(message, kept, full)


class AttackProcess:
    """One attack's process, from its start (``attack``: an ``AttackRef``, or a class with ``params``) to its
    end (``close``, or leaving the ``with`` block): every process it started is killed then.

    ``track``: the attack is asked ``skip_reason(track)`` there (``skip_reason()``); ``guesses``: the classes its
    guess may be rebuilt as (default: every registered game's); ``timeout``: seconds from its start to its guess;
    ``limits``: the quotas and process limits (default: ``Limits.from_env()``)."""

    def __init__(self, attack: AttackRef | type, *, params: dict[str, Any] | None = None, track: Any = None,
                 guesses: tuple[type, ...] | None = None, timeout: float | None = None,
                 limits: Limits | None = None, task: dict[str, Any] | None = None) -> None:
        self.attack = attack if isinstance(attack, AttackRef) else attack_ref(attack, params)
        self.name = self.attack.name
        self.guesses = guess_types() if guesses is None else guesses
        self.limits = Limits.from_env() if limits is None else limits
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.skip: str | None = None
        self._ready = False
        self._trained = self._cached_bytes = 0
        modules = sorted({self.attack.entry.partition(":")[0], *(g.__module__ for g in self.guesses),
                          *(["arena.pipeline.sandbox.tasks"] if task is not None else [])})
        own = [m for m in modules if server.own_module(m)]
        env = server.child_env()
        boot = pickle.dumps({"modules": own, "env": env, "path": env["PYTHONPATH"].split(os.pathsep),
                             "limits": self.limits.rlimits(),
                             # its own pickle, loaded only after the user change: it may name a plugin's classes
                             "track": None if track is None else pickle.dumps(track),
                             "attack": {"name": self.name, "entry": self.attack.entry, "params": self.attack.params},
                             "task": task,
                             # an untrusted attack's (or a plugin task's): added to its path after the user change
                             "site": trust.site_in_use() if task is not None or self.attack.site else None})
        ours, theirs = socket.socketpair()
        out_r, out_w = os.pipe()
        try:
            self.child = server.launch(theirs, own, env, out_w, self.limits.uid_base)
        except BaseException:
            os.close(out_r)
            raise
        finally:
            theirs.close()
            os.close(out_w)
        self.relay = _Relay(out_r, self.name, self.limits.output_bytes)
        self.relay.start()
        self.conn = Connection(ours.detach())
        with contextlib.suppress(OSError):  # it died at once: the first read says how
            self.conn.send_bytes(boot)

    def __enter__(self) -> AttackProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the attack's process and everything it started; stop relaying its output."""
        with contextlib.suppress(OSError):
            self.conn.close()
        if self.child.poll() is None:
            self.child.kill()
        self.child.wait()
        if getattr(self.child, "server_died", False):  # its processes were the server's to end: end them here
            pid = getattr(self.child, "pid", None)
            if pid is not None:
                server.sweep(server.attack_uid(self.limits.uid_base, pid), pid)
        self.relay.done.set()
        self.relay.join(5.0)

    # --- the conversation ---

    def _recv(self) -> bytes:
        wait = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
        try:
            ready = self.conn.poll(wait)
            message = self.conn.recv_bytes(self.limits.message_bytes) if ready else None
        except (EOFError, OSError) as exc:
            if isinstance(exc, OSError) and "bad message length" in str(exc):
                raise AttackFailed(f"quota: attack {self.name!r} sent a message over {self.limits.message_bytes} "
                                   "bytes (ARENA_SANDBOX_MESSAGE_BYTES)") from None
            self.child.wait()
            if getattr(self.child, "server_died", False):
                raise ServerDied(f"the sandbox's fork server died under attack {self.name!r}") from None
            raise AttackFailed(f"worker died: exit code {self.child.returncode}") from None  # as Ray and --serial
        if message is None:
            self.child.kill()
            raise AttackFailed(f"attack {self.name!r}: timeout: no guess in time")
        return message

    def _next(self) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        try:
            header, tensors = decode(self._recv())
        except (AttackFailed, ServerDied):
            raise
        except Exception as exc:  # noqa: BLE001 - whatever the child sent, it is its failure
            raise AttackFailed(f"attack {self.name!r}: its process sent a malformed message "
                               f"({clip_text(exc, 200)})") from None
        if header.get("op") == "error":
            raise _failure(header)
        return header, tensors

    def skip_reason(self) -> str | None:
        """Why the attack does not apply to the track (asked in its process), or None; waits until it is built."""
        while not self._ready:
            header, _ = self._next()
            if header.get("op") != "ready":
                raise AttackFailed(f"attack {self.name!r}: its process spoke out of turn ({header.get('op')!r})")
            skip = header.get("skip")
            if skip is not None and not isinstance(skip, str):
                raise AttackFailed(f"attack {self.name!r}: skip_reason gave a {type(skip).__name__}")
            self.skip, self._ready = (None if skip is None else clip_text(skip, ERROR_CHARS)), True
        return self.skip

    def answer(self) -> Any:
        """The answer of a sandboxed task (``task``: ``arena.pipeline.sandbox.catalog``), as JSON data."""
        header, _ = self._next()
        if header.get("op") != "answer":
            raise AttackFailed(f"{self.name}: its process spoke out of turn ({clip_text(header.get('op'), 50)!r})")
        return header.get("answer")

    def run(self, view: Any) -> Any:
        """``attack.run(view)`` in the attack's process; its guess, rebuilt as one of ``guesses``."""
        send, handles, rows = _split_view(view)
        self.skip_reason()
        self._quota_rows = self.limits.query_rows or max(MIN_QUERY_ROWS, 4 * rows)
        self._view_rows = rows
        payload = pickle.dumps({"view": (type(view), object.__getattribute__(view, "_attack"), send,
                                         object.__getattribute__(view, "_withheld"))})
        with contextlib.suppress(OSError):  # it is gone: the next read says how
            self.conn.send_bytes(payload)
        while True:
            header, tensors = self._next()
            op = header.get("op")
            if op == "result":
                try:
                    return self._guess(header, tensors)
                except (KeyError, TypeError, ValueError) as exc:
                    raise AttackFailed(f"attack {self.name!r}: malformed guess ({type(exc).__name__}: "
                                       f"{clip_text(exc, 500)})") from None
            if op != "call":
                raise AttackFailed(f"attack {self.name!r}: its process spoke out of turn ({clip_text(op, 50)!r})")
            self._check(handles, header, tensors)  # a refusal ends the attack: AttackFailed
            try:
                reply: tuple[str, Any] = ("ok", self._answer(handles, header, tensors))
            except Exception as exc:  # noqa: BLE001 - a bad request is the attack's error, raised in the child
                reply = ("error", f"{type(exc).__name__}: {exc}")
            with contextlib.suppress(OSError):
                self.conn.send_bytes(pickle.dumps(reply))

    def _guess(self, header: dict[str, Any], tensors: dict[str, torch.Tensor]) -> Any:
        kinds = {g.__name__: g for g in self.guesses}
        cls = kinds.get(header.get("type"))  # type: ignore[arg-type]  # the child's header: any value, a miss is None
        if cls is None:
            raise AttackFailed(f"attack {self.name!r} returned {clip_text(header.get('type'), 100)}, not one of "
                               f"{', '.join(kinds)}")
        return cls(**guess_fields(header, tensors, cls))

    # --- quotas ---

    def _check(self, handles: dict[str, Any], header: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
        """Refuse (``AttackFailed('quota: ...')``) a request over the limits, before any work is done for it."""
        target = handles.get(header.get("handle"))  # type: ignore[arg-type]  # the child's header: any value
        method = header.get("method")
        if isinstance(target, (BlackBox, LabelOnly)):
            X = tensors.get("X")
            rows = int(X.shape[0]) if X is not None and X.ndim else 0
            if rows > self._quota_rows:
                raise AttackFailed(f"quota: attack {self.name!r} queried {rows} rows at once, over the "
                                   f"{self._quota_rows} one query may ask (ARENA_SANDBOX_QUERY_ROWS)")
        elif target is not None and _is_procedure(target):
            n = int(header.get("n", 0)) if method == "train_chunks" else None
            shapes = [tensors.get("X")] if n is None else [tensors.get(f"{i}.X") for i in range(max(n, 0))]
            epochs = max(int(getattr(target.recipe, "epochs", 1) or 1), 1)
            per_call = self.limits.train_units or max(MIN_TRAIN_UNITS, 4 * target.chunk * self._view_rows * epochs)
            total = self.limits.train_total or 64 * per_call
            for X in shapes:
                units = (int(X.shape[0]) * int(X.shape[1]) if X is not None and X.ndim >= 2 else 0) * epochs
                if units > per_call:
                    raise AttackFailed(f"quota: attack {self.name!r} asked to train {units} model-record-epochs in "
                                       f"one call, over the {per_call} one call may ask (ARENA_SANDBOX_TRAIN_UNITS)")
                self._trained += units
            if self._trained > total:
                raise AttackFailed(f"quota: attack {self.name!r} asked to train {self._trained} model-record-epochs "
                                   f"in all, over the {total} one matchup may ask (ARENA_SANDBOX_TRAIN_TOTAL)")

    def _answer(self, handles: dict[str, Any], header: dict[str, Any], tensors: dict[str, torch.Tensor]) -> Any:
        """Serve one request of the child from the object behind its proxy."""
        target = handles.get(header.get("handle"))  # type: ignore[arg-type]  # the child's header: any value
        method = header.get("method")
        if isinstance(target, BlackBox) and method in _QUERY_METHODS:
            args = [tensors["X"]] + ([tensors["y"]] if method == "loss" else [])
            return getattr(target, method)(*args)
        if type(target) is LabelOnly and method == "predict":
            return target.predict(tensors["X"])
        if target is not None and _is_procedure(target) and method in ("__call__", "train_chunks"):
            procedure = target
            if self._cached_bytes >= self.limits.cache_bytes:  # its share of the shared cache is spent
                procedure = dataclasses.replace(target, cache=None)
            if method == "__call__":
                out = procedure(tensors["X"], tensors["y"], tensors["init"], tensors["train"], tensors.get("rX"),
                                tensors.get("ry"))
                self._count(out[0])
                return out
            n = int(header.get("n", 0))
            keys = ("X", "y", "init", "train", "rX", "ry")  # the reference set: a chunk's own, when it has one
            out = procedure.train_chunks([tuple(tensors[f"{i}.{k}"] for k in keys if f"{i}.{k}" in tensors)
                                          for i in range(n)])
            for models in out:
                self._count(models)
            return out
        raise ValueError(f"the sandbox does not answer {method!r} on {header.get('handle')!r}")

    def _count(self, models: Models) -> None:
        """Bytes of models trained for the attack through the shared cache (hits counted too: an upper bound)."""
        self._cached_bytes += sum(t.numel() * t.element_size() for t in models.state.values())


def run_attack(attack: AttackRef | type, view: Any, *, params: dict[str, Any] | None = None,
               timeout: float | None = None, guesses: tuple[type, ...] | None = None,
               limits: Limits | None = None) -> Any:
    """``attack.run(view)`` for the attack ``attack`` (an ``AttackRef``, or a class built with ``params``) in a
    separate, unprivileged process holding only the view; its guess, rebuilt as one of ``guesses`` (default:
    every registered game's). ``AttackFailed`` when the attack raises, exits, dies, is refused or outlives
    ``timeout`` seconds; ``TypeError`` for a view item the sandbox cannot hand over, before anything starts."""
    _split_view(view)
    with AttackProcess(attack, params=params, guesses=guesses, timeout=timeout, limits=limits) as process:
        return process.run(view)
