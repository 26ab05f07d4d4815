"""How the attack's process starts: forked by the arena's fork server, or, where none runs, exec'd fresh.

The fork server is an interpreter exec'd from the arena (``subprocess``) with the arena's environment less
``ARENA_RUN_SECRET``, its standard output discarded, working directory ``/``. It imports torch, NumPy and the
arena's own modules (``arena.*``, ``arena_plugins.*``: never a third party's, so no plugin's code runs there) and
otherwise only receives descriptors: per attack, the attack's pipe, a status socket, and the arena's stdout and
stderr. It never sees a view, a store or a secret, so neither does what it forks; the fork only spares each
attack the ~2.5 s of a fresh interpreter importing torch. The arena starts it on first use, or with ``start()``
(the serial tournament, before forking its matchups, which share it); it exits when every arena end of its
socket is closed, killing what runs. It kills an attack's process when its arena asks, or closes that attack's
status socket (the arena died, or gave up on it), and reports each exit code there.

Elsewhere than on Linux, with ``ARENA_SANDBOX_EXEC`` set, in the fork server itself and in an attack's process,
no fork server starts: each attack gets a fresh interpreter (``subprocess`` with exec) instead.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import socket
import struct
import subprocess
import sys
import threading
from typing import Any

from arena.pipeline.sandbox import child

SECRET_ENV = "ARENA_RUN_SECRET"
PRELOAD = ("arena.contracts.view",)
"""Imported by the fork server before its first fork; after that it imports, before forking, the arena's own
modules (``arena.*``, ``arena_plugins.*``, never a third party's) that an attack's process is to import, so that
the next one starts with them done."""
_OWN_MODULE = re.compile(r"(arena|arena_plugins)(\.[A-Za-z_][A-Za-z0-9_]*)*")
_server_lock = threading.Lock()
_server: _Server | None = None
_NO_SERVER = False  # set in the fork server, which starts none (nor do the attacks' processes: child.py)


def child_env() -> dict[str, str]:
    """The environment of a process the arena starts for attacks: the arena's, less the run secret, with its
    import path."""
    env = {k: v for k, v in os.environ.items() if k != SECRET_ENV}
    env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) if p else os.getcwd() for p in sys.path)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _may_serve() -> bool:
    return (sys.platform.startswith("linux") and not os.environ.get("ARENA_SANDBOX_EXEC") and not _NO_SERVER
            and not child.in_attack_process())


def launch(theirs: socket.socket, modules: list[str], env: dict[str, str]) -> Any:
    """The attack's process, given its end of the pipe (``theirs``) and the modules it is to import: forked by the
    fork server where one runs, else a fresh interpreter with ``env``. Either is seen as ``subprocess.Popen``'s
    ``poll``, ``wait``, ``kill``, ``returncode``."""
    return _fork_child(theirs, modules) or _exec_child(theirs, env)


def _exec_child(theirs: socket.socket, env: dict[str, str]) -> subprocess.Popen:
    """The attack's process as a fresh interpreter (where no fork server runs)."""
    return subprocess.Popen(
        [sys.executable, "-c", f"from arena.pipeline.sandbox.child import main; main({theirs.fileno()})"],
        pass_fds=(theirs.fileno(),), env=env, cwd="/", stdin=subprocess.DEVNULL,
    )


class _Server:
    """The arena's end of a fork server: a ``SOCK_SEQPACKET`` socket taking one message per attack (the attack's
    pipe, a status socket, the arena's stdout and stderr, as descriptors). Each message is whole, so processes
    forked from the arena (the serial tournament's) share it; answers come back on each attack's own status
    socket, never on this one."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            env = child_env()
            self.process = subprocess.Popen(
                [sys.executable, "-c", f"from arena.pipeline.sandbox.server import main; main({theirs.fileno()})"],
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
    if not _may_serve():
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
    if _may_serve():
        with _server_lock:
            if _server is None:
                with contextlib.suppress(OSError):
                    _server = _Server()


def main(fd: int) -> None:
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
        child.warm_reachable()
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
                child.warm_reachable()
        conn, status_fd, out, err = fds
        pid = os.fork()
        if pid == 0:
            try:
                os.dup2(out, 1)
                os.dup2(err, 2)
                os.closerange(3, conn)
                os.closerange(conn + 1, 1 << 16)  # the server's socket and every other attack's status
                signal.signal(signal.SIGINT, signal.default_int_handler)
                child.main(conn, parent=server)  # exits
            finally:
                os._exit(1)
        for f in (conn, out, err):
            os.close(f)
        try:
            pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pidfd = None
        running[pid] = (socket.socket(fileno=status_fd), pidfd)
