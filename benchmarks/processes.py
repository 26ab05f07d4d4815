"""Run an `arena` command as a child process, optionally sampling the memory of its whole process tree.

Ray's GCS server, raylet and workers are all descendants of the `arena` process, so the tree rooted at the
child holds every process a run uses. Memory is read from /proc: RSS (which counts a shared page in every
process mapping it, so the sum over-counts torch's shared libraries) and PSS (shared pages split between their
users, so the sum is the tree's real footprint, Ray's shared-memory object store included).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OK_EXIT = (0, 3)  # 3: finished, and the DP audit reports a violation (a finding, not a failed run)


def arena_command(*args: str) -> list[str]:
    """The installed `arena` console script of this interpreter's environment, with ``args``."""
    return [str(Path(sys.executable).with_name("arena")), *args]


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
            tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it, now."""
    tree, out, todo = _children(), [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += tree.get(p, [])
    return out


def _kib(path: str, field: str) -> int:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


@dataclass(frozen=True)
class Memory:
    """Peaks over the samples of a process tree, in bytes."""

    pss_sum: int
    rss_sum: int
    rss_largest: int
    processes: int
    samples: int


class TreeSampler:
    """Samples the process tree under ``pid`` every ``interval`` seconds in a thread until stopped."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid, self.interval = pid, interval
        self.pss = self.rss = self.largest = self.processes = self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        pids = descendants(self.pid)
        rss = [_kib(f"/proc/{p}/status", "VmRSS:") * 1024 for p in pids]
        pss = sum(_kib(f"/proc/{p}/smaps_rollup", "Pss:") * 1024 for p in pids)
        self.pss, self.rss = max(self.pss, pss), max(self.rss, sum(rss))
        self.largest, self.processes = max(self.largest, max(rss, default=0)), max(self.processes, len(pids))
        self.samples += 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def peaks(self) -> Memory:
        return Memory(self.pss, self.rss, self.largest, self.processes, self.samples)


def run_command(command: list[str], sample_memory: bool = False, env: dict[str, str] | None = None) -> Memory | None:
    """Run ``command`` from the repository root to completion (``env`` added to this process's environment);
    raise with its output if it failed."""
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env={**os.environ, **(env or {})}) as proc:
        if sample_memory:
            with TreeSampler(proc.pid) as sampler:
                output, _ = proc.communicate()
            memory: Memory | None = sampler.peaks()
        else:
            output, memory = proc.communicate()[0], None
    if proc.returncode not in OK_EXIT:
        raise RuntimeError(f"{' '.join(command)} exited {proc.returncode}:\n{output[-3000:]}")
    return memory
