"""How the attack's process starts and ends: forked by the arena's fork server, or, where none runs, exec'd fresh.

The fork server is an interpreter exec'd from the arena (``subprocess``) with the arena's environment less
``ARENA_RUN_SECRET``, its standard output discarded, working directory ``/``. It imports torch, NumPy and the
arena's own modules (``arena.*``, ``arena_plugins.*``: never a third party's, so no plugin's code runs there) and
otherwise only receives descriptors: per attack, the attack's pipe, a status socket and the write end of the pipe
that is to be its standard output and error. It never sees a view, a store or a secret, so neither does what it
forks; the fork only spares each attack the ~2.5 s of a fresh interpreter importing torch. The arena starts it on
first use, or with ``start()`` (a serial run, while it plans; its worker processes share it); it exits
when every arena end of its socket is closed, killing what runs.

Each attack's process is a session and process group of its own (``setsid``), and, run as root, takes a user of
its own (``limits``: ``uid_base`` + its pid), so attacks cannot signal, trace or read one another. The fork server
is a child subreaper (``PR_SET_CHILD_SUBREAPER``): whatever an attack starts and leaves behind (a ``setsid``
daemon, the children of a process that exited) becomes the server's child, and is killed on sight. When an
attack's process ends, or its arena asks, or closes that attack's status socket (the arena died or gave up on
it), the server kills the attack's process group and every process of its user (``sweep``: a helper that takes
the user and sends ``SIGKILL`` to all it may signal), removes the files that user left in ``/tmp``, ``/var/tmp``
and ``/dev/shm`` at any depth (``scratch.sweep_files``), then reaps it and reports its pid and exit code on the
status socket. A status socket that closes before the exit code came tells the arena the server died
(``_Forked.server_died``).

Elsewhere than on Linux, with ``ARENA_SANDBOX_EXEC`` set, in the fork server itself and in an attack's process,
no fork server starts: each attack gets a fresh interpreter (``subprocess`` with exec, a new session), whose user
the arena sweeps when it ends (its orphans are then the system's to reap).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Any

from arena.pipeline.sandbox import child, scratch

SECRET_ENV = "ARENA_RUN_SECRET"
PRELOAD = ("arena.contracts.view",)
"""Imported by the fork server before its first fork; after that it imports, before forking, the arena's own
modules (``arena.*``, ``arena_plugins.*``, never a third party's) that an attack's process is to import, so that
the next one starts with them done."""
_OWN_MODULE = re.compile(r"(arena|arena_plugins)(\.[A-Za-z_][A-Za-z0-9_]*)*")
SCRATCH_DIRS = scratch.SCRATCH_DIRS  # where any user may leave files
_PR_SET_CHILD_SUBREAPER = 36
_server_lock = threading.Lock()
_server: _Server | None = None
_NO_SERVER = False  # set in the fork server, which starts none (nor do the attacks' processes: child.py)


def own_module(name: str) -> bool:
    """Whether ``name`` is one of the arena's own modules (imported before the attack's process changes user)."""
    return bool(_OWN_MODULE.fullmatch(name))


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


# --- ending an attack: its process group, its user, its files ---


def attack_uid(uid_base: int, pid: int) -> int | None:
    """The user of the attack's process ``pid`` (``uid_base`` + pid), or None where attacks take no user of their
    own (``uid_base`` 0, or this process is not root and so could not have given it one)."""
    return uid_base + pid if uid_base and hasattr(os, "geteuid") and os.geteuid() == 0 else None


def sweep(uid: int | None, pgid: int | None = None, since: float | None = None) -> None:
    """Kill the process group ``pgid`` and every process of the user ``uid`` (a helper takes the user and sends
    ``SIGKILL`` to all it may signal: ``kill(-1)`` reaches every one of them at once, so a fork bomb cannot outrun
    it), then remove what that user left in the scratch directories (made since ``since``, the attack's start,
    where it is known: ``scratch.sweep_files``)."""
    if pgid is not None:
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)
    if uid is None:
        return
    helper = os.fork()
    if helper == 0:
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            with contextlib.suppress(OSError):
                os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(helper, 0)
    scratch.sweep_files(uid, since=since)  # at any depth of /tmp, /var/tmp, /dev/shm: Ray's session folders too


# --- the arena's side ---


def launch(theirs: socket.socket, modules: list[str], env: dict[str, str], output: int, uid_base: int) -> Any:
    """The attack's process, given its end of the pipe (``theirs``), the modules it is to import, the descriptor of
    its standard output and error (``output``) and the base of its user: forked by the fork server where one
    runs, else a fresh interpreter with ``env``. Either is seen as ``subprocess.Popen``'s ``poll``, ``wait``,
    ``kill``, ``returncode``, with ``pid`` (once known) and ``server_died``."""
    return _fork_child(theirs, modules, output, uid_base) or _Exec(theirs, env, output, uid_base)


class _Exec:
    """The attack's process as a fresh interpreter in a session of its own (where no fork server runs); when it
    ends, its process group and user are swept before it is reaped, so its pid (and user) are not reused first."""

    server_died = False

    def __init__(self, theirs: socket.socket, env: dict[str, str], output: int, uid_base: int) -> None:
        self.started = time.time()
        self.process = subprocess.Popen(
            [sys.executable, "-c", f"from arena.pipeline.sandbox.child import main; main({theirs.fileno()})"],
            pass_fds=(theirs.fileno(),), env=env, cwd="/", stdin=subprocess.DEVNULL, stdout=output, stderr=output,
            start_new_session=True,
        )
        self.pid = self.process.pid
        self.uid = attack_uid(uid_base, self.pid)

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def _end(self, block: bool) -> int | None:
        if self.process.returncode is None:
            options = os.WEXITED | os.WNOWAIT | (0 if block else os.WNOHANG)
            try:
                if os.waitid(os.P_PID, self.pid, options) is None:
                    return None
            except ChildProcessError:
                pass
            sweep(self.uid, self.pid, self.started)
            self.process.wait()
        return self.process.returncode

    def poll(self) -> int | None:
        return self._end(block=False)

    def wait(self) -> int:
        return self._end(block=True)  # type: ignore[return-value]

    def kill(self) -> None:
        if self.process.returncode is None:
            sweep(self.uid, self.pid, self.started)


class _Server:
    """The arena's end of a fork server: a ``SOCK_SEQPACKET`` socket taking one message per attack (the attack's
    pipe, a status socket, its output pipe, as descriptors). Each message is whole, so processes forked from the
    arena (the serial tournament's) share it; answers come back on each attack's own status socket."""

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

    def alive(self) -> bool:
        return self.process.poll() is None

    def spawn(self, conn: socket.socket, modules: list[str], output: int, uid_base: int) -> _Forked:
        status, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        words = ["spawn", str(int(uid_base)), *(m for m in modules if own_module(m))]
        try:
            socket.send_fds(self.socket, [" ".join(words).encode()], [conn.fileno(), theirs.fileno(), output])
        except BaseException:
            status.close()
            raise
        finally:
            theirs.close()
        return _Forked(status)


class _Forked:
    """The attack's process as the fork server made it, seen through its status socket (``subprocess.Popen``'s
    ``poll``, ``wait``, ``kill``, ``returncode``): the server sends its pid, kills it when asked or when this end
    closes, sweeps and reaps it and sends its exit code (negative: the signal that killed it). A socket that
    closes with no exit code means the server died (``server_died``; the code reads -9)."""

    def __init__(self, status: socket.socket) -> None:
        self.status = status
        self.pid: int | None = None
        self.returncode: int | None = None
        self.server_died = False

    def _read(self, block: bool) -> int | None:
        while self.returncode is None:
            self.status.setblocking(block)
            try:
                data = self.status.recv(16)
            except (BlockingIOError, InterruptedError):
                return None
            except OSError:
                data = b""
            if data[:1] == b"P" and len(data) == 5:
                self.pid = struct.unpack("<i", data[1:])[0]
                continue
            if data[:1] == b"X" and len(data) == 5:
                self.returncode = struct.unpack("<i", data[1:])[0]
            else:  # no word: the server died
                self.returncode, self.server_died = -9, True
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


def _fork_child(theirs: socket.socket, modules: list[str], output: int, uid_base: int) -> _Forked | None:
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
                return _server.spawn(theirs, modules, output, uid_base)
            except OSError:  # it died (killed, or its arena's fork was left with a closed end): start another
                stale, _server = _server, None
                if stale is not None:
                    stale.socket.close()
    return None


def start() -> None:
    """Start this process's fork server now, or again if it died (it loads in the background): the processes
    forked from here (a serial run's worker processes) then share it instead of each starting its own."""
    global _server
    if _may_serve():
        with _server_lock:
            if _server is not None and not _server.alive():
                _server.socket.close()
                _server = None
            if _server is None:
                with contextlib.suppress(OSError):
                    _server = _Server()


# --- the fork server ---


def _children_of(pid: int) -> list[int]:
    """Pids whose parent is ``pid`` (read from /proc)."""
    found = []
    with contextlib.suppress(OSError), os.scandir("/proc") as entries:
        for entry in entries:
            if entry.name.isdigit():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    with open(f"/proc/{entry.name}/stat", "rb") as f:
                        stat = f.read()
                    if int(stat[stat.rindex(b")") + 2:].split()[1]) == pid:
                        found.append(int(entry.name))
    return found


class _Running:
    """One attack's process in the fork server: its status socket, user, and start (``time.time()`` before its
    fork)."""

    def __init__(self, status: socket.socket, uid: int | None, started: float) -> None:
        self.status = status
        self.uid = uid
        self.started = started
        self.open = True  # its arena end is open and not yet asked to kill


def main(fd: int) -> None:
    """The fork server: import what attacks need, then fork the attack's process for each message; end it (its
    group, its user) when its arena asks or closes its status socket; kill every orphan it is handed as subreaper;
    sweep and reap each attack's process and send its exit code; on the end of every arena end of its socket (the
    arena is gone), end what runs and exit. It reads nothing but descriptors."""
    import ctypes
    import select

    global _NO_SERVER
    _NO_SERVER = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the arena's to handle
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    ctl = socket.socket(fileno=fd)
    for module in PRELOAD:
        with contextlib.suppress(Exception):
            importlib.import_module(module)
    with contextlib.suppress(Exception):
        child.warm_reachable()
    server = os.getpid()
    running: dict[int, _Running] = {}

    def end(pid: int) -> None:
        sweep(running[pid].uid, pid, running[pid].started)

    def reap() -> None:
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None:
                return
            pid = info.si_pid
            if pid in running:
                end(pid)  # before the reap: its pid, and so its user, cannot be taken by another meanwhile
            _, status = os.waitpid(pid, 0)
            attack = running.pop(pid, None)
            if attack is not None:
                with contextlib.suppress(OSError):
                    attack.status.send(b"X" + struct.pack("<i", os.waitstatus_to_exitcode(status)))
                attack.status.close()

    def kill_orphans() -> None:
        for pid in _children_of(server):
            if pid not in running:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    while True:
        watch: list[Any] = [ctl, wake_r] + [a.status for a in running.values() if a.open]
        try:
            ready = set(select.select(watch, [], [], 0.5 if running else None)[0])
        except InterruptedError:
            ready = set()
        if wake_r in ready:
            with contextlib.suppress(OSError):
                while os.read(wake_r, 4096):
                    pass
        for pid, attack in list(running.items()):
            if attack.open and attack.status in ready:
                with contextlib.suppress(OSError):
                    attack.status.recv(16)  # a word (kill it) or nothing (its arena went): the same end
                attack.open = False  # asked (or its arena went): once is enough
                end(pid)
        kill_orphans()
        reap()
        if ctl not in ready:
            continue
        try:
            message, fds, _, _ = socket.recv_fds(ctl, 1 << 16, 8)
        except OSError:
            message, fds = b"", []
        if not message and not fds:  # every arena end is closed: the arena is gone
            for pid in list(running):
                end(pid)
            kill_orphans()
            os._exit(0)
        words = message.decode(errors="replace").split()
        if words[:1] != ["spawn"] or len(words) < 2 or not words[1].isdigit() or len(fds) != 3:
            for f in fds:
                os.close(f)
            continue
        uid_base, fresh = int(words[1]), [m for m in words[2:] if own_module(m) and m not in sys.modules]
        for module in fresh:
            with contextlib.suppress(Exception):
                importlib.import_module(module)
        if fresh:
            with contextlib.suppress(Exception):
                child.warm_reachable()
        conn, status_fd, output = fds
        started = time.time()
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()  # a session and process group of its own, before anything else
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.dup2(output, 1)
                os.dup2(output, 2)
                os.closerange(3, conn)
                os.closerange(conn + 1, 1 << 16)  # the server's socket and every other attack's status
                signal.signal(signal.SIGINT, signal.default_int_handler)
                child.main(conn, parent=server)  # exits
            finally:
                os._exit(1)
        for f in (conn, output):
            os.close(f)
        status = socket.socket(fileno=status_fd)
        with contextlib.suppress(OSError):
            status.send(b"P" + struct.pack("<i", pid))
        running[pid] = _Running(status, attack_uid(uid_base, pid), started)
