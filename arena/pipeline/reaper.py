"""The reaper of a local Ray cluster: when the driver that started it dies, every process it started dies too.

Ray ties its head processes to the driver that started them, but its agents (``DashboardAgent``,
``RuntimeEnvAgent``) and workers outlive a driver killed with ``SIGKILL`` by up to a minute (an agent waits on the
dead cluster before it exits), and with a worker its training, the sandbox's fork server and its attacks. The
reaper is a small interpreter (``start``; only the standard library, run as a script) that holds the read end of
a pipe whose write end only the driver holds: it notes the driver's descendants every second while the driver
lives; when the pipe reaches its end without the word to stand down (the driver died, however), it kills those
and their descendants (``SIGKILL``, again until none is left) and exits. ``stop`` stands it down.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

STAND_DOWN = b"q"
INTERVAL = 1.0


def _processes() -> dict[int, tuple[int, str]]:
    """pid → (parent pid, start time) of every process (read from /proc)."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
                fields = stat[stat.rindex(b")") + 2:].split()
                found[int(entry)] = (int(fields[1]), fields[19].decode())
    return found


def _descendants(roots: set[int], table: dict[int, tuple[int, str]]) -> set[tuple[int, str]]:
    """(pid, start time) of every process below ``roots`` (not the roots themselves)."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if (child, table[child][1]) not in found:
                found.add((child, table[child][1]))
                todo.append(child)
    return found


def _kill(noted: set[tuple[int, str]]) -> None:
    """Kill the noted processes still running (the same start time: not a reused pid) and, until none is left,
    whatever they started."""
    for _ in range(20):
        table = _processes()
        alive = {pid for pid, started in noted if table.get(pid, (0, ""))[1] == started}
        targets = alive | {pid for pid, _ in _descendants(alive, table)}
        targets.discard(os.getpid())
        if not targets:
            return
        for pid in targets:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        noted |= {(pid, table[pid][1]) for pid in targets if pid in table}
        time.sleep(0.1)


def main(driver: int, fd: int) -> None:
    """Note the driver's descendants until the pipe ``fd`` ends; kill them unless it said to stand down."""
    import select

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the driver's to handle
    noted: set[tuple[int, str]] = set()
    word = b""
    while True:
        table = _processes()
        noted |= {p for p in _descendants({driver}, table) if p[0] != os.getpid()}
        if select.select([fd], [], [], INTERVAL)[0]:
            word = os.read(fd, 1)
            break
    if word != STAND_DOWN:
        _kill(noted)


def start() -> tuple[subprocess.Popen, int] | None:
    """Start the reaper of this process's descendants (Linux only): the reaper and the write end of its pipe."""
    if not sys.platform.startswith("linux"):
        return None
    read, write = os.pipe()
    try:
        process = subprocess.Popen([sys.executable, "-I", os.path.abspath(__file__), str(os.getpid()), str(read)],
                                   pass_fds=(read,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   start_new_session=True)
    except OSError:
        os.close(write)
        return None
    finally:
        os.close(read)
    return process, write


def stop(reaper: tuple[subprocess.Popen, int] | None) -> None:
    """Stand the reaper down (the driver ends normally) and reap it."""
    if reaper is None:
        return
    process, write = reaper
    with contextlib.suppress(OSError):
        os.write(write, STAND_DOWN)
    with contextlib.suppress(OSError):
        os.close(write)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(5)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
