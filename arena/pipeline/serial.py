"""``--serial``: one matchup after another, in a worker process forked from the arena and kept for the next.

The worker is a ``fork`` of the arena, so it starts at once with everything imported, and it plays matchup after
matchup as long as each ends normally: its imports, the datasets it loaded, its registries and the sandbox's fork
server (started here before the first fork, shared by every worker) serve the next matchup as a Ray worker's
serve the next task. The worker is what faults end, never the arena: a plugin that exits (``sys.exit``,
``os._exit``, a signal), raises ``KeyboardInterrupt`` or outlives its matchup's timeout fails its own matchup,
and the next matchup gets a fresh worker. A worker is also retired after a plugin raised something other than an
``Exception`` (it may have left the process half torn down) and when the fork server died under its attack.
Sharing a worker between matchups shares nothing the trust model separates: the worker is the challenger's code
in the arena's trust zone, as the arena is (``docs/reliability.md``); each attack still runs in a process of its
own, forked fresh from the fork server and ended with its matchup.
"""

from __future__ import annotations

import importlib
import multiprocessing
import multiprocessing.connection
import multiprocessing.context
import multiprocessing.process
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from arena.pipeline import sandbox
from arena.pipeline.execute import base_row, play_matchup
from arena.pipeline.plan import Matchup
from arena.pipeline.sandbox.child import die_with_parent

WARM = ("scipy.stats", "dp_accounting.pld", "dp_accounting.rdp")
"""What a worker would import anyway, imported once in the arena before the first fork: the membership metrics
rank with ``scipy.stats``, a DP-SGD defense calibrates its noise with dp_accounting; about 0.8 and 1.5 s of CPU a
process."""
LEARNED = ("torch._dynamo",)
"""What only some matchups import, imported in the arena once a worker has, before it forks the next worker (a
worker keeps its own imports): ``torch.func.grad`` (the ``vmap`` path of a module that is neither a dense stack
nor a plain layer stack) imports Dynamo, ~2 s of CPU that most runs never need."""


def run_serial(
    todo: list[Matchup],
    run_dir: str,
    on_row: Callable[[dict], None],
    on_start: Callable[[int], None],
    timeout: Callable[[Matchup], float],
    retries: int = 0,
) -> None:
    """Play ``todo`` in order in a reused worker (``Worker``); a matchup whose worker died is played again, in a
    fresh worker, up to ``retries`` times, as Ray does, and so is one whose fork server died under its attack.
    ``on_start(n)`` is told how many matchups are in flight (here always one) before each starts."""
    warm_for_workers()
    worker: Worker | None = None
    learned: list[str] = []
    try:
        for m in todo:
            on_start(1)
            for _ in range(retries + 1):
                if worker is None:
                    warm_for_workers(learned)  # what the last worker needed, for the next (never after the last)
                    sandbox.start()  # the workers share this fork server (started again if it died)
                    worker = Worker(run_dir)
                row, died, learned = worker.play(m, timeout(m))
                if not worker.alive():
                    worker = None
                if not died:
                    break
            on_row(row)
    finally:
        if worker is not None:
            worker.close(wait=5.0)


def warm_for_workers(names: Iterable[str] = WARM) -> None:
    """Import ``names`` in the process the workers fork from."""
    for name in names:
        importlib.import_module(name)


def _context() -> multiprocessing.context.ForkContext | multiprocessing.context.SpawnContext:
    """Fork where the platform has it (the worker starts at once with everything imported), else spawn."""
    if "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


class Worker:
    """A worker process playing the matchups it is sent, one at a time, until a fault ends it.

    The arena enforces each matchup's limit by killing the worker, so a plugin that catches every
    ``BaseException`` cannot outlive it. A Ctrl-C of the user reaches the arena (the worker ignores SIGINT): the
    worker is killed and the ``KeyboardInterrupt`` goes on up."""

    def __init__(self, run_dir: str) -> None:
        ours, theirs = _context().Pipe(duplex=True)
        self.process = _context().Process(target=_serve, args=(run_dir, theirs, os.getpid()))
        with _sigint_held():
            self.process.start()
        theirs.close()
        self.conn: multiprocessing.connection.Connection | None = ours

    def alive(self) -> bool:
        return self.conn is not None

    def play(self, matchup: Matchup, limit: float) -> tuple[dict[str, Any], bool, list[str]]:
        """Play ``matchup`` within ``limit`` seconds; return its row, whether the worker died without answering (or
        its fork server died under the attack: the matchup may be played again), and which of ``LEARNED`` the
        worker has imported. A worker that timed out, died or saw a plugin raise a ``BaseException`` is ended."""
        assert self.conn is not None, "a retired worker plays nothing"
        t0 = time.monotonic()
        try:
            self.conn.send(matchup)
            answered = self.conn.poll(limit)
            message = self.conn.recv() if answered else None
        except (EOFError, BrokenPipeError, ConnectionResetError):
            answered, message = True, None
        except BaseException:
            self.close()
            raise
        seconds = time.monotonic() - t0
        if message is None:
            self.close()
            if not answered:
                return failed_row(matchup, f"timeout: exceeded {limit:g}s", seconds), False, []
            return failed_row(matchup, f"worker died: exit code {self.process.exitcode}", seconds), True, []
        kind, payload, imported = message
        if kind != "row":
            self.close()
        if kind == "died":  # the fork server died under the attack: no fault of the attack's, played again
            return failed_row(matchup, f"worker died: {payload}", seconds), True, imported
        return (payload if kind == "row" else failed_row(matchup, payload, seconds)), False, imported

    def close(self, wait: float = 0.0) -> None:
        """End the worker for good and reap it: its end of the pipe closes, so an idle worker exits by itself within
        ``wait`` seconds; then it is killed."""
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if wait:
            self.process.join(wait)
        if self.process.is_alive():
            self.process.kill()
        self.process.join()


@contextmanager
def _sigint_held() -> Iterator[None]:
    """Hold a Ctrl-C back while forking: one landing during the fork would be raised inside an at-fork hook, which
    Python ignores. It is delivered, as KeyboardInterrupt, once the worker exists."""
    mask = getattr(signal, "pthread_sigmask", None)
    if mask is None:
        yield
        return
    mask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        mask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _serve(run_dir: str, conn: Any, arena: int) -> None:
    """The worker's side: for each matchup received, play it and send ('row', row), ('error', message) for an exit
    or interrupt a plugin raised, or ('died', message) when the fork server died under the attack, each with the
    ``LEARNED`` modules imported so far; end after anything but a row, or when the arena's end closes. ``arena``
    is the arena's pid, taken before the fork: an arena killed before this line runs is noticed too."""
    die_with_parent(arena)  # a SIGKILLed arena leaves no matchup playing on, holding its run directory
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the arena answers the user's Ctrl-C
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # held back by the arena while forking
    while True:
        try:
            matchup = conn.recv()
        except (EOFError, OSError):
            return
        try:
            message: tuple[str, Any] = ("row", play_matchup(matchup, run_dir))
        except sandbox.ServerDied as exc:
            message = ("died", str(exc))
        except BaseException as exc:  # noqa: BLE001 - sys.exit or KeyboardInterrupt raised by plugin code
            message = ("error", f"plugin raised {type(exc).__name__}: {exc}")
        conn.send((*message, [m for m in LEARNED if m in sys.modules]))
        if message[0] != "row":
            return


def failed_row(matchup: Matchup, error: str, seconds: float) -> dict[str, Any]:
    """The row of a matchup that failed outside its plugins' reach (a timeout, a dead worker)."""
    row = base_row(matchup)
    row.update(status="failed", utility=None, metrics={}, operating_points={}, notes=[], claim=None, traceback=None,
               error=sandbox.clip_text(error, sandbox.ERROR_CHARS), seconds=round(seconds, 4))  # capped, printable
    return row
