"""Running a plan: skip what the run directory already holds, train each release once, play matchups on Ray.

Rows are appended to results.jsonl as matchups finish, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import importlib
import multiprocessing
import multiprocessing.context
import multiprocessing.process
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from arena.pipeline import cluster, sandbox
from arena.pipeline.execute import base_row, play_matchup, train_release
from arena.pipeline.plan import Matchup, Plan
from arena.pipeline.procedure import gpu_request
from arena.pipeline.progress import Progress
from arena.pipeline.sandbox.child import die_with_parent
from arena.pipeline.store import RunStore

FINISHED = {"ok", "skipped"}


def pending(plan: Plan, store: RunStore, fresh: bool = False) -> list[Matchup]:
    """Matchups whose key has no finished (ok or skipped) row yet; failed ones are played again; every one when
    ``fresh``. A matchup two scenarios both list is played once, as the last of them (whose place in the scenario
    ``matchup_records`` keeps)."""
    unique = list({m.key: m for m in plan.matchups}.values())
    if fresh:
        return unique
    done = {row["key"] for row in store.results() if row.get("status") in FINISHED}
    return [m for m in unique if m.key not in done]


def matchup_records(plan: Plan) -> dict[str, dict[str, Any]]:
    """What the run directory records of each planned matchup (``RunStore.set_matchups``): its labels, and what
    it is, to read a row's place in the scenario without the plan."""
    return {m.key: {"defense_label": m.defense.label, "attack_label": m.attack.label, "scenario": m.scenario,
                    "track": m.track.name, "defense": m.defense.name, "attack": m.attack.name, "seed": m.seed,
                    "release_key": m.release_key}
            for m in plan.matchups}


def _by_release(matchups: list[Matchup]) -> dict[str, list[Matchup]]:
    groups: dict[str, list[Matchup]] = {}
    for m in matchups:
        groups.setdefault(m.release_key, []).append(m)
    return groups


_RAY_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
"""The colour codes Ray writes into its errors' texts (``\x1b[36mray::task()\x1b[39m``): dropped, not escaped."""


def run_serial(
    todo: list[Matchup],
    store: RunStore,
    on_row: Callable[[dict], None],
    on_start: Callable[[int], None],
    timeout: Callable[[Matchup], float],
    retries: int = 0,
) -> None:
    """One matchup after another, each in its own child process; releases come from the shared cache.

    A child that exits (``sys.exit``, ``os._exit``, a signal), raises ``KeyboardInterrupt`` or outlives its
    timeout fails its own matchup and the run goes on; a child that died is played again up to ``retries`` times,
    as Ray does, and so is one whose sandbox's fork server died under its attack. ``on_start(n)`` is told how many
    matchups are in flight (here always one) before each starts.
    """
    _warm_for_children()
    learned: list[str] = []
    for group in _by_release(todo).values():
        for m in group:
            on_start(1)
            for _ in range(retries + 1):
                _warm_for_children(learned)  # what an earlier child needed, for this one (never after the last)
                sandbox.start()  # the matchups' processes, forked from here, share this fork server (again if it died)
                row, died, learned = play_in_child(m, str(store.root), timeout(m))
                if not died:
                    break
            on_row(row)


WARM = ("scipy.stats", "dp_accounting.pld", "dp_accounting.rdp")
"""What the forked matchups would each import again, imported once before the first fork: the membership metrics
rank with ``scipy.stats``, a DP-SGD defense calibrates its noise with dp_accounting; about 0.8 and 1.5 s of CPU a
process."""
LEARNED = ("torch._dynamo",)
"""What only some matchups import, imported in the parent once a child has (for the matchups after it):
``torch.func.grad`` (the ``vmap`` path of a module that is neither a dense stack nor a plain layer stack) imports
Dynamo, ~2 s of CPU that most runs never need."""


def _warm_for_children(names: Iterable[str] = WARM) -> None:
    """Import ``names`` in the process the matchups fork from."""
    for name in names:
        importlib.import_module(name)


def _context() -> multiprocessing.context.ForkContext | multiprocessing.context.SpawnContext:
    """Fork where the platform has it (the child starts at once with everything imported), else spawn."""
    if "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def play_in_child(matchup: Matchup, run_dir: str, limit: float) -> tuple[dict[str, Any], bool, list[str]]:
    """Play one matchup in a child process; return its row, whether the child died without answering, and which of
    ``LEARNED`` it imported.

    The parent enforces ``limit`` by killing the child, so a plugin that catches every ``BaseException`` cannot
    outlive it. A Ctrl-C of the user reaches the parent (the child ignores SIGINT): the child is killed and the
    ``KeyboardInterrupt`` goes on up.
    """
    t0 = time.monotonic()
    reader, writer = _context().Pipe(duplex=False)
    child = _context().Process(target=_child, args=(matchup, run_dir, writer))
    with _sigint_held():
        child.start()
    writer.close()
    try:
        answered = reader.poll(limit)
        message = reader.recv() if answered else None
    except EOFError:
        message = None
    except BaseException:
        _kill(child)
        raise
    finally:
        reader.close()
    seconds = time.monotonic() - t0
    if message is None:
        timed_out = not answered
        _kill(child)
        if timed_out:
            return failed_row(matchup, f"timeout: exceeded {limit:g}s", seconds), False, []
        return failed_row(matchup, f"worker died: exit code {child.exitcode}", seconds), True, []
    child.join(5.0)
    _kill(child)
    kind, payload, imported = message
    if kind == "died":  # the fork server died under the attack: no fault of the attack's, played again
        return failed_row(matchup, f"worker died: {payload}", seconds), True, imported
    return (payload if kind == "row" else failed_row(matchup, payload, seconds)), False, imported


@contextmanager
def _sigint_held() -> Iterator[None]:
    """Hold a Ctrl-C back while forking: one landing during the fork would be raised inside an at-fork hook, which
    Python ignores. It is delivered, as KeyboardInterrupt, once the child exists."""
    mask = getattr(signal, "pthread_sigmask", None)
    if mask is None:
        yield
        return
    mask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        mask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _kill(child: multiprocessing.process.BaseProcess) -> None:
    """Stop a child for good and reap it."""
    if child.is_alive():
        child.kill()
    child.join()


def _child(matchup: Matchup, run_dir: str, writer: Any) -> None:
    """The child's side: play, send ('row', row) or ('error', message) for an exit or interrupt a plugin raised."""
    die_with_parent(os.getppid())  # a SIGKILLed arena leaves no matchup playing on, holding its run directory
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent answers the user's Ctrl-C
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # held back by the parent while forking
    try:
        message: tuple[str, Any] = ("row", play_matchup(matchup, run_dir))
    except sandbox.ServerDied as exc:
        message = ("died", str(exc))
    except BaseException as exc:  # noqa: BLE001 - sys.exit or KeyboardInterrupt raised by plugin code
        message = ("error", f"plugin raised {type(exc).__name__}: {exc}")
    writer.send((*message, [m for m in LEARNED if m in sys.modules]))
    writer.close()


def failed_row(matchup: Matchup, error: str, seconds: float) -> dict[str, Any]:
    row = base_row(matchup)
    row.update(status="failed", utility=None, metrics={}, operating_points={}, notes=[], claim=None, traceback=None,
               error=sandbox.clip_text(error, sandbox.ERROR_CHARS), seconds=round(seconds, 4))  # capped, printable
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
    verbose: bool = False,
) -> None:
    """One Ray task per release, then one per matchup depending on it; rows reach ``on_row`` as they finish.

    A matchup's clock runs from its submission, so it covers the training of its release, as in ``run_serial``.
    A release is submitted with the first of its matchups to start, so no more releases train than matchups are
    in flight, each under a running clock. When a matchup times out before its release is done (a defense
    catching every exception while it trains), the release is stopped with it (``ray.cancel(force=True)`` kills
    its worker, freeing the CPU for the rest of the run) and its other matchups fail at once.

    The cluster is ``arena.pipeline.cluster.session``'s: the one at ``address`` (joined by ``cluster.connect``
    before the run directory was touched), else a new local one (never one found running on this machine); Ray's
    own start-up warnings reach the terminal only when ``verbose``. Every task's worker ends when this process
    does (``cluster.watch_driver``)."""
    with cluster.session(address, workers, verbose=verbose):
        _play_on_ray(todo, store, on_row, on_start=on_start, workers=workers, timeout=timeout, retries=retries)


def _play_on_ray(todo: list[Matchup], store: RunStore, on_row: Callable[[dict], None], *,
                 on_start: Callable[[int], None], workers: int | None, timeout: Callable[[Matchup], float],
                 retries: int) -> None:
    """``run_ray``'s scheduling, on the cluster it joined or started."""
    import ray

    release_task = ray.remote(num_cpus=1, max_retries=retries)(_release_or_error)
    # (ray's stubs type retry_exceptions as a bool; its documented list of exception classes is accepted)
    matchup_task = ray.remote(num_cpus=1, max_retries=retries,  # a fork server's death is a worker's
                              retry_exceptions=[sandbox.ServerDied])(_play_after)  # type: ignore[call-overload]
    gpus = {m.track.device: gpu_request(m.track.device) for m in todo}
    limit = workers or int(ray.available_resources().get("CPU", 1)) or 1
    run_dir = str(store.root)
    driver = cluster.this_driver()  # each worker ends its process when this one ends
    queue = [m for group in _by_release(todo).values() for m in group]
    releases: dict[str, Any] = {}  # release key -> its task, submitted with its first matchup
    stopped: set[str] = set()  # releases stopped because a matchup timed out waiting for them

    def release(m: Matchup) -> Any:
        if m.release_key not in releases:
            task = release_task.options(num_gpus=gpus[m.track.device])
            releases[m.release_key] = task.remote(m, run_dir, driver)
        return releases[m.release_key]

    def prefetch(waiting: list[Matchup], ahead: int) -> None:
        """Submit the releases of the next ``ahead`` distinct releases in the queue: a matchup task waits for its
        release without holding a CPU, so while the matchups in flight wait for theirs (a vulnerable-record
        release trains dozens of targets) the other workers train the next releases instead of idling."""
        keys: list[str] = []
        for m in waiting:
            if m.release_key not in keys and m.release_key not in stopped:
                keys.append(m.release_key)
                release(m)
            if len(keys) >= ahead:
                return

    def stopped_row(m: Matchup, seconds: float) -> dict[str, Any]:
        return failed_row(m, f"timeout: its release did not finish within {timeout(m):g}s", seconds)

    running: dict[Any, tuple[Matchup, float]] = {}
    while queue or running:
        while queue and len(running) < limit:
            m = queue.pop(0)
            if m.release_key in stopped:
                on_row(stopped_row(m, 0.0))
                continue
            task = matchup_task.options(num_gpus=gpus[m.track.device])
            running[task.remote(m, run_dir, release(m), driver)] = (m, time.monotonic())
        prefetch(queue, limit)
        if not running:
            continue
        on_start(len(running))
        ready, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
        for ref in ready:
            m, t0 = running.pop(ref)
            try:
                row = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - a worker died after its retries, or its release was stopped
                seconds = time.monotonic() - t0
                row = (stopped_row(m, seconds) if m.release_key in stopped else
                       failed_row(m, f"worker died: {type(exc).__name__}: {_RAY_COLOUR.sub('', str(exc))}", seconds))
            on_row(row)
        now = time.monotonic()
        for ref, (m, t0) in list(running.items()):
            if now - t0 > timeout(m):
                ray.cancel(ref, force=True)
                running.pop(ref)
                own = releases[m.release_key]
                if m.release_key not in stopped and not ray.wait([own], timeout=0)[0]:
                    ray.cancel(own, force=True)
                    stopped.add(m.release_key)
                on_row(failed_row(m, f"timeout: exceeded {timeout(m):g}s", now - t0))


def _release_or_error(matchup: Matchup, run_dir: str, driver: cluster.Driver | None) -> dict[str, Any]:
    """Prefetch the release; an exception is left for the matchups to report as their own failure."""
    cluster.watch_driver(driver)
    try:
        return train_release(matchup, run_dir)
    except Exception as exc:  # noqa: BLE001
        return {"error": repr(exc)}


def _play_after(matchup: Matchup, run_dir: str, release: dict[str, Any],
                driver: cluster.Driver | None) -> dict[str, Any]:
    cluster.watch_driver(driver)
    return play_matchup(matchup, run_dir)


def run(
    plan: Plan,
    store: RunStore,
    *,
    serial: bool = False,
    workers: int | None = None,
    address: str | None = None,
    progress: TextIO | None = None,
    verbose: bool = False,
    fresh: bool = False,
) -> list[dict[str, Any]]:
    """Play every pending matchup of ``plan`` into ``store``; return the rows written by this call.

    First records the plan's matchups (``RunStore.set_matchups``): the rows of any other key are history from
    now on. ``fresh``: discard the run directory's cache of trained models and play every matchup again (the new
    rows replace the old ones of the same keys)."""
    store.set_matchups(matchup_records(plan))
    if fresh:
        shutil.rmtree(store.cache.root, ignore_errors=True)
    todo = pending(plan, store, fresh)
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

    retries = max(s.retries for _, s in plan.scenarios)
    if serial:
        run_serial(todo, store, on_row, meter.started, timeout, retries)
    else:
        run_ray(todo, store, on_row, on_start=meter.started, workers=workers, address=address, timeout=timeout,
                retries=retries, verbose=verbose)
    return written
