"""The arena's side of the sandbox: what the attack's process is given, what it may ask, what comes back.

``run_attack`` builds what the child receives from the view's granted items alone (``_split_view``): plain
values, ``Models`` where a view grants them, and for each interface a ``Remote`` that the child turns into a
proxy; anything else is refused (``TypeError``) before a process starts. It then starts the attack's process
(``arena.pipeline.sandbox.server.launch``), sends it the boot message and serves it (``_serve``): each call of a proxy
is answered from the object behind it (``_answer``: ``BlackBox`` queries, ``LabelOnly`` labels, training through
the run's cache), until the guess comes back, rebuilt only as a class the game allows (``guess_types``: the
game's declared ``Guess``). A failure of the attack's process, or a timeout, is raised as ``AttackFailed``.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import socket
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import torch

from arena.contracts.release import BlackBox, LabelOnly, Models
from arena.pipeline.sandbox import server
from arena.pipeline.sandbox.wire import TRAIN_ATTRS, Remote, decode, guess_fields

_PLAIN = (int, float, str, bool, bytes, type(None), np.integer, np.floating, np.bool_)
_QUERY_METHODS = frozenset({"predict_proba", "log_proba", "loss"})


class AttackFailed(Exception):  # noqa: N818 - reads as what happened to the matchup
    """The attack's process raised, exited, was killed or ran out of time; ``child_traceback`` is its traceback
    when it raised."""

    def __init__(self, message: str, child_traceback: str | None = None) -> None:
        super().__init__(message)
        self.child_traceback = child_traceback


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


def _split_view(view: Any) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """(what the child gets per item, the parent's objects behind each proxy, modules the child must import).
    Lists, tuples and dicts are walked (a proxy inside one is named ``item.index``); anything not plain data nor
    a known interface is refused with ``TypeError``."""
    handles: dict[str, Any] = {}
    modules = {type(view).__module__}

    def wrap(name: str, value: Any) -> Any:
        if isinstance(value, BlackBox):
            handles[name] = value
            return Remote("query", {"handle": name})
        if type(value) is LabelOnly:
            handles[name] = value
            return Remote("labels", {"handle": name})
        if _is_procedure(value):
            handles[name] = value
            modules.update({type(value.defense).__module__, type(value.arch.model).__module__})
            return Remote("training", {"handle": name, **{a: getattr(value, a) for a in TRAIN_ATTRS}})
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


def run_attack(attack: Any, view: Any, *, timeout: float | None = None,
               guesses: tuple[type, ...] | None = None) -> Any:
    """``attack.run(view)`` in a separate, unprivileged process holding only the view; its guess, rebuilt as one
    of ``guesses`` (default: ``guess_types()``, every registered game's; the arena passes its game's,
    ``guess_types(game)``). ``AttackFailed`` when the attack raises, exits, dies or outlives ``timeout`` seconds."""
    guesses = guess_types() if guesses is None else guesses
    send, handles, modules = _split_view(view)
    modules = sorted({*modules, type(attack).__module__, *(g.__module__ for g in guesses)})
    payload = pickle.dumps({
        "view": (type(view), object.__getattribute__(view, "_attack"), send,
                 object.__getattribute__(view, "_withheld")),
        "attack": attack,
    })
    env = server.child_env()
    boot = pickle.dumps({"modules": modules, "payload": payload, "env": env,
                         "path": env["PYTHONPATH"].split(os.pathsep)})
    ours, theirs = socket.socketpair()
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        child = server.launch(theirs, modules, env)
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
    return cls(**guess_fields(header, tensors, cls))
