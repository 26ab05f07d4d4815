"""Running a plan: skip what the run directory already holds, train each release once, play matchups on Ray.

Rows are appended to results.jsonl as matchups finish, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from arena.execute import base_row, play_matchup, train_release
from arena.plan import Matchup, Plan
from arena.procedure import gpu_request
from arena.progress import Progress
from arena.store import RunStore

FINISHED = {"ok", "skipped"}


def pending(plan: Plan, store: RunStore) -> list[Matchup]:
    """Matchups whose key has no finished (ok or skipped) row yet; failed ones are played again."""
    done = {row["key"] for row in store.results() if row.get("status") in FINISHED}
    return [m for m in plan.matchups if m.key not in done]


def _by_release(matchups: list[Matchup]) -> dict[str, list[Matchup]]:
    groups: dict[str, list[Matchup]] = {}
    for m in matchups:
        groups.setdefault(m.release_key, []).append(m)
    return groups


class MatchupTimeout(BaseException):
    """A serial matchup ran past its timeout; a BaseException so that a plugin's ``except Exception`` cannot keep it."""


@contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """Raise MatchupTimeout in this thread after ``seconds``: Unix main thread only, elsewhere no limit.

    The signal is handled between Python bytecodes, so a plugin blocked inside one long C call is stopped when
    that call returns.
    """
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(signum: int, frame: object) -> None:
        raise MatchupTimeout

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_serial(
    todo: list[Matchup],
    store: RunStore,
    on_row: Callable[[dict], None],
    on_start: Callable[[int], None],
    timeout: Callable[[Matchup], float],
) -> None:
    """In-process, one matchup after another (for debugging); releases come from the shared cache.

    ``on_start(n)`` is told how many matchups are in flight (here always one) before each starts.
    """
    for group in _by_release(todo).values():
        for m in group:
            on_start(1)
            t0, limit = time.monotonic(), timeout(m)
            try:
                with _alarm(limit):
                    row = play_matchup(m, str(store.root))
            except MatchupTimeout:
                row = failed_row(m, f"timeout: exceeded {limit:g}s", time.monotonic() - t0)
            on_row(row)


def failed_row(matchup: Matchup, error: str, seconds: float) -> dict[str, Any]:
    row = base_row(matchup)
    row.update(status="failed", utility=None, metrics={}, notes=[], claim=None, error=error, traceback=None,
               seconds=round(seconds, 4))
    return row


def run_ray(
    todo: list[Matchup],
    store: RunStore,
    on_row: Callable[[dict], None],
    *,
    on_start: Callable[[int], None],
    workers: int | None,
    address: str | None,
    timeout: Callable[[Matchup], float],
    retries: int,
) -> None:
    """One Ray task per release, then one per matchup depending on it; rows reach ``on_row`` as they finish."""
    import ray

    started_here = not ray.is_initialized()
    if started_here:
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(
                num_cpus=workers or os.cpu_count(),
                include_dashboard=False,
                log_to_driver=False,
                object_store_memory=128 * 1024 * 1024,
            )
    try:
        release_task = ray.remote(num_cpus=1, max_retries=retries)(_release_or_error)
        matchup_task = ray.remote(num_cpus=1, max_retries=retries)(_play_after)
        gpus = {m.track.device: gpu_request(m.track.device) for m in todo}
        limit = workers or int(ray.available_resources().get("CPU", 1)) or 1
        run_dir = str(store.root)
        queue = []
        for group in _by_release(todo).values():
            release_ref = release_task.options(num_gpus=gpus[group[0].track.device]).remote(group[0], run_dir)
            queue.extend((m, release_ref) for m in group)
        running: dict[Any, tuple[Matchup, float]] = {}
        while queue or running:
            while queue and len(running) < limit:
                m, release_ref = queue.pop(0)
                task = matchup_task.options(num_gpus=gpus[m.track.device])
                running[task.remote(m, run_dir, release_ref)] = (m, time.monotonic())
            on_start(len(running))
            ready, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
            for ref in ready:
                m, t0 = running.pop(ref)
                try:
                    row = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - a worker died after its retries
                    row = failed_row(m, f"worker died: {type(exc).__name__}: {exc}", time.monotonic() - t0)
                on_row(row)
            now = time.monotonic()
            for ref, (m, t0) in list(running.items()):
                if now - t0 > timeout(m):
                    ray.cancel(ref, force=True)
                    running.pop(ref)
                    on_row(failed_row(m, f"timeout: exceeded {timeout(m):g}s", now - t0))
    finally:
        if started_here:
            ray.shutdown()


def _release_or_error(matchup: Matchup, run_dir: str) -> dict[str, Any]:
    """Prefetch the release; an exception is left for the matchups to report as their own failure."""
    try:
        return train_release(matchup, run_dir)
    except Exception as exc:  # noqa: BLE001
        return {"error": repr(exc)}


def _play_after(matchup: Matchup, run_dir: str, release: dict[str, Any]) -> dict[str, Any]:
    return play_matchup(matchup, run_dir)


def run(
    plan: Plan,
    store: RunStore,
    *,
    serial: bool = False,
    workers: int | None = None,
    address: str | None = None,
    progress: TextIO | None = None,
) -> list[dict[str, Any]]:
    """Play every pending matchup of ``plan`` into ``store``; return the rows written by this call."""
    todo = pending(plan, store)
    meter = Progress(len(todo), progress or sys.stderr)
    written: list[dict[str, Any]] = []

    def on_row(row: dict[str, Any]) -> None:
        store.append_result(row)
        written.append(row)
        meter.finished(row)

    if not todo:
        return written
    limits: dict[str, float] = {}
    for _, s in plan.scenarios:  # two files may share a scenario name: the longer limit holds
        limits[s.name] = max(limits.get(s.name, 0.0), s.timeout)

    def timeout(m: Matchup) -> float:
        return limits[m.scenario]

    if serial:
        run_serial(todo, store, on_row, meter.started, timeout)
    else:
        run_ray(todo, store, on_row, on_start=meter.started, workers=workers, address=address, timeout=timeout,
                retries=max(s.retries for _, s in plan.scenarios))
    return written
