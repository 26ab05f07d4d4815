"""Running a plan: skip what the run directory already holds, train each release once, play matchups on Ray.

Rows are appended to results.jsonl as matchups finish, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import re
import shutil
import sys
import time
from collections.abc import Callable, Container
from typing import Any, TextIO

from arena.pipeline import cluster, sandbox
from arena.pipeline.execute import play_matchup, train_release
from arena.pipeline.plan import Matchup, Plan
from arena.pipeline.procedure import gpu_request
from arena.pipeline.progress import Progress
from arena.pipeline.serial import failed_row, run_serial
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


TRAIN_CPUS = 1.0
"""The CPUs of a task that trains (a release, a matchup whose attack is granted ``training`` and trains shadow
models): its torch threads (``_threads``), one, as every task of a cluster runs."""
LIGHT_CPUS = 0.5
"""The CPU share of a matchup whose attack trains nothing: its release is trained by its own task, so what is left
is the attack's process, answering its queries and scoring, with waits on each other in between."""


def cpus(m: Matchup) -> float:
    """The CPUs a matchup's task holds: ``TRAIN_CPUS`` when its attack is granted ``training`` (or the plan could
    not say), else ``LIGHT_CPUS``."""
    threat = m.attack.threat_model
    return TRAIN_CPUS if threat is None or "training" in threat else LIGHT_CPUS


def held(m: Matchup, trained: Container[str]) -> float:
    """The CPUs the driver counts for a matchup in flight: its task's (``cpus``) once its release is ``trained``
    (a release key in it: done, failed or stopped), else ``TRAIN_CPUS``. Until then its release's task trains on a
    whole CPU while the matchup's clock runs; a second matchup let in beside it on half of that CPU would keep the
    release from starting, so the first matchup would time out waiting for a matchup it does not depend on."""
    return cpus(m) if m.release_key in trained else TRAIN_CPUS


LOOKAHEAD = 64
"""How far into the queue ``next_matchup`` looks for a matchup that fits."""


def next_matchup(queue: list[Matchup], running: list[Matchup], capacity: float,
                 trained: Container[str]) -> int | None:
    """Where in ``queue`` the next matchup to start is, or None for none now: the first whose CPUs fit beside
    those ``running`` hold within ``capacity`` (``held``, given the release keys ``trained``), skipping a
    training matchup of a release whose training matchup runs (the two would train the same cached shadow pool,
    and the second would hold its CPU waiting on the first's lock; it starts once the first is done and finds
    the pool cached). With nothing running the first one starts, whatever its size. Only the first
    ``LOOKAHEAD`` are looked at, so that a plan of 10,000 matchups costs the driver no more per start than one of
    100."""
    if not running:
        return 0 if queue else None
    used = sum(held(m, trained) for m in running)
    if used + LIGHT_CPUS > capacity + 1e-9:
        return None
    pools = {m.release_key for m in running if cpus(m) == TRAIN_CPUS}
    for i, m in enumerate(queue[:LOOKAHEAD]):
        if used + held(m, trained) <= capacity + 1e-9 and not (cpus(m) == TRAIN_CPUS and m.release_key in pools):
            return i
    return None


_RAY_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
"""The colour codes Ray writes into its errors' texts (``\x1b[36mray::task()\x1b[39m``): dropped, not escaped."""


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
    its worker, freeing the CPU for the rest of the run) and its other matchups fail at once. Each task holds the
    CPUs it uses (``cpus``), and the matchups in flight hold at most ``workers`` CPUs (default: the cluster's;
    a light matchup counts as a whole CPU until its release is trained, ``held``), chosen in queue order by
    ``next_matchup``.

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

    release_task = ray.remote(num_cpus=TRAIN_CPUS, max_retries=retries)(_release_or_error)
    # (ray's stubs type retry_exceptions as a bool; its documented list of exception classes is accepted)
    matchup_task = ray.remote(num_cpus=TRAIN_CPUS, max_retries=retries,  # a fork server's death is a worker's
                              retry_exceptions=[sandbox.ServerDied])(_play_after)  # type: ignore[call-overload]
    gpus = {m.track.device: gpu_request(m.track.device) for m in todo}
    capacity = float(workers or ray.available_resources().get("CPU", 1) or 1)
    run_dir = str(store.root)
    driver = cluster.this_driver()  # each worker ends its process when this one ends
    queue = [m for group in _by_release(todo).values() for m in group]
    releases: dict[str, Any] = {}  # release key -> its task, submitted with its first matchup
    stopped: set[str] = set()  # releases stopped because a matchup timed out waiting for them
    trained: set[str] = set()  # releases whose task has ended (trained, failed or stopped)

    def look_for_trained() -> None:
        waiting = {ref: key for key, ref in releases.items() if key not in trained}
        if waiting:
            done, _ = ray.wait(list(waiting), num_returns=len(waiting), timeout=0)
            trained.update(waiting[ref] for ref in done)

    def release(m: Matchup) -> Any:
        if m.release_key not in releases:
            task = release_task.options(num_gpus=gpus[m.track.device])
            releases[m.release_key] = task.remote(m, run_dir, driver, TRAIN_CPUS)
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
        cluster.close_session_sockets()  # Ray's later workers open it again (see there)
        look_for_trained()
        while (i := next_matchup(queue, [m for m, _ in running.values()], capacity, trained | stopped)) is not None:
            m = queue.pop(i)
            if m.release_key in stopped:
                on_row(stopped_row(m, 0.0))
                continue
            task = matchup_task.options(num_cpus=cpus(m), num_gpus=gpus[m.track.device])
            running[task.remote(m, run_dir, release(m), driver, cpus(m))] = (m, time.monotonic())
        prefetch(queue, max(1, int(capacity)))
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


def _release_or_error(matchup: Matchup, run_dir: str, driver: cluster.Driver | None,
                      threads: float) -> dict[str, Any]:
    """Prefetch the release; an exception is left for the matchups to report as their own failure."""
    cluster.watch_driver(driver)
    try:
        return train_release(matchup, run_dir, threads=_threads(threads))
    except Exception as exc:  # noqa: BLE001
        return {"error": repr(exc)}


def _play_after(matchup: Matchup, run_dir: str, release: dict[str, Any],
                driver: cluster.Driver | None, threads: float) -> dict[str, Any]:
    cluster.watch_driver(driver)
    return play_matchup(matchup, run_dir, threads=_threads(threads))


def _threads(cpus: float) -> int:
    """The torch threads of a task holding ``cpus`` CPUs: as many as it holds whole ones, at least one."""
    return max(1, int(cpus))


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
        run_serial([m for group in _by_release(todo).values() for m in group], str(store.root), on_row,
                   meter.started, timeout, retries)
    else:
        run_ray(todo, store, on_row, on_start=meter.started, workers=workers, address=address, timeout=timeout,
                retries=retries, verbose=verbose)
    return written
