"""The attack's process: what runs there, from the boot message to the guess sent back.

``main`` receives the boot message (the arena's own modules to import, the environment and import path a fresh
interpreter would have, the limits, the attack's name, class and parameters, the track), imports those modules,
keeps the import directories that its new user could not reach open (``keep_code_reachable``), sets its limits
(``set_limits``: ``RLIMIT_NPROC``, ``RLIMIT_AS``, ``RLIMIT_FSIZE``, no core, ``PR_SET_NO_NEW_PRIVS``), changes
user when run as root (``drop_privileges``: a user of its own, else ``nobody``) and dies with its parent. Only then
does any of the attack's code run: its class is imported (``attack_class``), its parameters validated, the
attack built and asked ``skip_reason``. The view comes next; its interfaces become proxies (``QueryProxy``,
``LabelProxy``, ``TrainingProxy``) that send every call over the pipe to the arena. It runs the attack and sends
back its guess, or its failure, as a JSON header and raw tensors (``arena.pipeline.sandbox.wire``), then exits.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pickle
import sys
import traceback
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from arena import trust
from arena.contracts.release import Models
from arena.pipeline.sandbox.scratch import private_mounts, ray_roots
from arena.pipeline.sandbox.wire import TRAIN_ATTRS, Remote, encode, guess_message

if TYPE_CHECKING:
    from arena.contracts.attack import Attack

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

    def __call__(self, X: torch.Tensor, y: torch.Tensor, init_seeds: Any, train_seeds: Any,
                 reference_X: torch.Tensor | None = None, reference_y: torch.Tensor | None = None) -> Any:
        reference = {} if reference_X is None or reference_y is None else {"rX": reference_X, "ry": reference_y}
        return self._call("__call__", {"X": X, "y": y, "init": torch.as_tensor(init_seeds, dtype=torch.int64),
                                       "train": torch.as_tensor(train_seeds, dtype=torch.int64), **reference})

    def train_chunks(self, chunks: Any) -> list[Models]:
        tensors = {}
        for i, (X, y, init, train, *reference) in enumerate(chunks):
            tensors.update({f"{i}.X": X, f"{i}.y": y, f"{i}.init": torch.as_tensor(init, dtype=torch.int64),
                            f"{i}.train": torch.as_tensor(train, dtype=torch.int64)})
            if len(reference) == 2:  # the chunk's own reference set (a population pool's)
                tensors.update({f"{i}.rX": reference[0], f"{i}.ry": reference[1]})
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


def _under(path: str, roots: tuple[str, ...]) -> bool:
    path = os.path.abspath(path)
    return any(path == r or path.startswith(r + os.sep) for r in roots)


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


def keep_code_reachable(hidden: tuple[str, ...] = ()) -> int:
    """Before the user change: every import directory (``sys.path``, packages' ``__path__``) that ``nobody`` could
    not reach (e.g. an interpreter under /root, a plugin in a private temporary directory) is opened as a
    directory descriptor and named ``/proc/self/fd/N`` from then on, so that imports keep working; so is every
    one under ``hidden`` (Ray's folders, which ``scratch.private_mounts`` covers next). Only code directories are
    opened, never the run directory. Returns how many were opened."""
    opened: dict[str, str] = {}

    def route(path: str) -> str:
        if not isinstance(path, str) or not path or (_reachable(path) and not _under(path, hidden)):
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


def reachable_alias(path: str) -> str:
    """``path``, or, where the attack's user could not reach it, ``/proc/self/fd/N`` of a directory descriptor
    opened now (before the user change, as ``keep_code_reachable`` does for import directories)."""
    if _reachable(path):
        return path
    try:
        return f"/proc/self/fd/{os.open(path, os.O_RDONLY | os.O_DIRECTORY)}"
    except OSError:
        return path


# --- becoming the attack's process ---

_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38


def _prctl(option: int, value: int) -> int:
    import ctypes

    return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def _vm_size() -> int:
    """This process's virtual memory size in bytes (0 where /proc does not say)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in open("/proc/self/status"):  # noqa: SIM115 - read once, closed with the file object
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def set_limits(limits: dict[str, int]) -> None:
    """Before any of the attack's code: no core dumps; ``RLIMIT_FSIZE``, ``RLIMIT_AS`` (its size now plus
    ``memory``) and ``RLIMIT_NPROC`` (counted per user: its own user's processes and threads); no gaining of
    privileges through exec (``PR_SET_NO_NEW_PRIVS``)."""
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if limits.get("file_bytes"):
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_bytes"],) * 2)
    if limits.get("memory"):
        resource.setrlimit(resource.RLIMIT_AS, (_vm_size() + limits["memory"],) * 2)
    if limits.get("nproc"):
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["nproc"],) * 2)
    with contextlib.suppress(Exception):
        _prctl(_PR_SET_NO_NEW_PRIVS, 1)


def drop_privileges(uid_base: int = 0) -> str:
    """When running as root, become a user without supplementary groups: ``uid_base`` + this process's pid (a
    user of its own, needing no /etc/passwd entry), or ``nobody`` where that cannot be taken or ``uid_base`` is 0.
    Say what isolation holds."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "same user as the arena (not root: no user to drop to)"
    os.setgroups([])
    if uid_base:
        uid = uid_base + os.getpid()
        try:
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            return f"user {uid} (its own)"
        except OSError:
            pass
    import pwd

    try:
        user = pwd.getpwnam(SANDBOX_USER)
    except KeyError:
        return f"root (no user {SANDBOX_USER!r} on this system)"
    os.setgid(user.pw_gid)
    os.setuid(user.pw_uid)
    return f"user {SANDBOX_USER} ({user.pw_uid}, shared)"


def die_with_parent(parent: int) -> None:
    """Linux: SIGKILL this process when its parent dies (set after the user change, which clears it)."""
    import signal

    with contextlib.suppress(Exception):
        _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
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
        plugins.forget_registries()
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


def attack_class(ref: dict[str, Any]) -> type[Attack]:
    """The attack's class, imported here: from its ``entry`` (``module:qualname``), else by its registered
    ``name`` from the plugins (as the arena registered it); it must be an ``arena.Attack`` declaring that name."""
    from arena.contracts.attack import Attack
    from arena.pipeline.sandbox.static import static_attack

    module, _, qualname = str(ref["entry"]).partition(":")
    found: Any = None
    with contextlib.suppress(ImportError, AttributeError):
        found = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    if not (isinstance(found, type) and issubclass(found, Attack)) or static_attack(found).name != ref["name"]:
        from arena.plugins import registries

        found = registries().attacks.get(ref["name"])
    return found


def _view(conn: Connection, payload: dict[str, Any]) -> Any:
    view_cls, attack_name, send, withheld = payload["view"]
    view = object.__new__(view_cls)
    object.__setattr__(view, "_attack", attack_name)
    object.__setattr__(view, "_items", {name: _unwrap(conn, value) for name, value in send.items()})
    object.__setattr__(view, "_withheld", withheld)
    return view


def main(fd: int, *, parent: int | None = None) -> None:
    """Entry point of the attack's process: a fresh interpreter, or forked by the fork server (its ``parent``).

    Boot (from the arena, trusted): the environment and import path, the arena's own modules to import, the
    limits, the attack (``name``, ``entry``, ``params``) and the track. It imports those modules, keeps the code
    reachable, sets its limits and changes user, dies with its parent; then, as the attack's user, imports the
    attack's class, validates its parameters, builds it, asks ``skip_reason(track)`` (with a track) and says
    ``ready``; then, for each view the arena sends until it closes the connection (none: it gave up, e.g. the
    matchup is skipped; several: a game that plays many target models in one process), runs the attack and sends
    back its guess, or its failure."""
    global _ATTACK_PROCESS
    _ATTACK_PROCESS = True  # an attack that forks starts no fork server
    trust.enter_sandbox()  # every plugin is loaded here, the untrusted site's where it is added
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

    message = None
    try:
        boot = pickle.loads(conn.recv_bytes())  # from the arena: trusted
        if forked:
            _forked_as(boot["env"], boot["path"])
        for module in boot["modules"]:
            importlib.import_module(module)
        untrusted = boot.get("site")
        if os.geteuid() == 0:
            keep_code_reachable(hidden=tuple(ray_roots()))
            untrusted = untrusted and reachable_alias(untrusted)
            private_mounts(boot["limits"].get("tmp_bytes", 0))  # its own /dev/shm and TMPDIR; Ray's folders hidden
        set_limits(boot["limits"])
        drop_privileges(boot["limits"].get("uid_base", 0))
        die_with_parent(parent)
        torch.set_num_threads(1)
        # from here on, the attack's code runs
        if untrusted:  # the untrusted site, and its start-up files (.pth), in this process only
            import site

            site.addsitedir(untrusted)
            importlib.invalidate_caches()
        if boot.get("task") is not None:  # plugins to list or parameters to validate: one answer, then exit
            from arena.pipeline.sandbox.tasks import answer

            message = encode({"op": "answer", "answer": answer(boot["task"], attack_class)}, {})
        else:
            cls = attack_class(boot["attack"])
            attack = cls(cls.Params.model_validate(boot["attack"]["params"]))
            track = None if boot.get("track") is None else pickle.loads(boot["track"])  # may import a plugin's module
            skip = attack.skip_reason(track) if track is not None else None
            if skip is not None and not isinstance(skip, str):
                raise TypeError(f"skip_reason returned {type(skip).__name__}, not a str or None")
            conn.send_bytes(encode({"op": "ready", "skip": None if skip is None else str.__str__(skip)}, {}))
            while True:  # one guess per view, until the arena is done with this attack (end of file)
                try:
                    data = conn.recv_bytes()
                except EOFError:
                    break
                conn.send_bytes(guess_message(attack.run(_view(conn, pickle.loads(data)))))
    except BaseException as exc:  # noqa: BLE001 - sys.exit, KeyboardInterrupt: all the attack's failure
        fail(exc)
    else:
        if message is not None:
            with contextlib.suppress(BaseException):
                conn.send_bytes(message)
    with contextlib.suppress(BaseException):
        conn.close()
    with contextlib.suppress(BaseException):
        sys.stdout.flush()
    os._exit(0)
