"""The CPU time of a whole command: every process it started, Ray's and the sandbox's included.

``getrusage(RUSAGE_CHILDREN)`` counts a process once it has been waited for, and adds to it what that process had
waited for of its own. A command's orphans (Ray's workers and agents outliving their raylet, a fork server whose
arena exited without waiting for it) would escape it, so this process makes itself a child subreaper
(``PR_SET_CHILD_SUBREAPER``): every orphan below it is re-parented here, and ``cpu_of`` waits for all of them
before reading the counter. That still missed most of a Ray run's CPU (the same command, scenarios/membership.yaml
with ``--workers 2``, measured both ways: 50.8 CPU-s by the counter against 98.4 by the command's cgroup), so
where this process may make a cgroup (cgroup v1's cpuacct or cgroup v2, as root), the command runs in a cgroup of
its own, which every process it starts inherits whatever becomes of its parent, and its CPU is the cgroup's; the
counter is the fallback. CPU time, unlike wall-clock time, is hardly moved by other processes on a shared machine
(a busy machine adds some cache misses and context switches, not seconds of user time).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.processes import OK_EXIT, ROOT

_PR_SET_CHILD_SUBREAPER = 36
ORPHANS_SECONDS = 60.0
"""How long ``cpu_of`` waits for the command's orphans to end (the reaper and watchdogs end them in seconds)."""


@dataclass(frozen=True)
class Cost:
    """What a command cost: CPU seconds (user + system) of its whole process tree, and wall seconds."""

    cpu: float
    wall: float


def _subreaper() -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _children() -> set[int]:
    """This process's children now (Linux's /proc)."""
    found: set[int] = set()
    with contextlib.suppress(OSError):
        for task in Path("/proc/self/task").iterdir():
            found |= {int(c) for c in (task / "children").read_text().split()}
    return found


def reap_all(deadline: float, keep: frozenset[int] = frozenset()) -> None:
    """Wait for every child of this process (the orphans re-parented here included) until none is left but those
    in ``keep`` (processes that outlive the command by design: a cluster it joined)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() > deadline or _children() <= keep:
                return
            time.sleep(0.05)


_CGROUP_ROOTS = (Path("/sys/fs/cgroup/cpuacct"), Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))


def _cgroup() -> Path | None:
    """A new empty cgroup that accounts CPU, or None where none can be made here."""
    for root in _CGROUP_ROOTS:
        if not ((root / "cpuacct.usage").exists() or (root / "cgroup.procs").exists() and
                (root / "cpu.stat").exists()):
            continue
        try:
            group = root / f"arena-bench-{os.getpid()}-{time.monotonic_ns()}"
            group.mkdir()
        except OSError:
            continue
        if (group / "cpuacct.usage").exists() or (group / "cpu.stat").exists():
            return group
        with contextlib.suppress(OSError):
            group.rmdir()
    return None


def _cgroup_seconds(group: Path) -> float:
    if (group / "cpuacct.usage").exists():
        return int((group / "cpuacct.usage").read_text()) / 1e9
    stat = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines())
    return int(stat["usage_usec"]) / 1e6


def _used() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cpu_of(command: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT,
           keep: frozenset[int] = frozenset()) -> Cost:
    """Run ``command`` to completion and return the CPU of every process it started and its wall time; raise
    with its output if it failed. Call it with no other child of this process running but those in ``keep``."""
    _subreaper()
    reap_all(time.monotonic(), keep)
    group = _cgroup()
    enter = None if group is None else (lambda: (group / "cgroup.procs").write_text(str(os.getpid())))
    before, start = _used(), time.perf_counter()
    try:
        proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, **(env or {})}, preexec_fn=enter)
        output, _ = proc.communicate()
        wall = time.perf_counter() - start
        reap_all(time.monotonic() + ORPHANS_SECONDS, keep)
        if proc.returncode not in OK_EXIT:
            raise RuntimeError(f"{' '.join(command)} exited {proc.returncode}:\n{output[-3000:]}")
        return Cost(_used() - before if group is None else _cgroup_seconds(group), wall)
    finally:
        if group is not None:
            with contextlib.suppress(OSError):
                group.rmdir()
