"""The Ray cluster a run plays on: joined (``--address``) before the run directory is touched, or started here, and
every worker process of the run ending with the driver.

``connect(address)`` joins a cluster before anything is written: an address that refuses or does not accept a
connection within ``CONNECT_SECONDS``, or where Ray's ``init`` fails (no cluster found, one that refuses this
client), is a ``ScenarioError`` worded as such (``arena run`` exits 2). (A port that accepts connections but is
no Ray cluster is left to Ray, which retries for a while before it fails.)

``session`` gives the run its cluster: the one ``connect`` joined, else a new local one (never one found running),
shut down at the end. A local cluster's workers run at the arena's own priority (``worker_niceness`` 0 rather
than Ray's 15, unless ``RAY_worker_niceness`` says otherwise): a matchup's timeout is wall-clock time, so workers
that every other process on the machine may starve would fail matchups that ``--serial`` plays in time (Ray's job
supervisor does the same for its jobs).

When the driver dies, however it dies, Ray ends the head processes of the local cluster it started, but its agents
and workers may outlive it for up to a minute, and with a worker the training, the fork server and the attack it
runs. So a local cluster started here has a reaper (``arena.pipeline.reaper``) that kills every process the driver
started within a second or two of its death; and each task, on the driver's machine, starts a watchdog
(``watch_driver``, once per worker process) that kills its worker within half a second of the driver's end (its
pid and start time checked), for a cluster joined at ``--address`` too. The fork server then sees its socket close
and kills the attacks it ran.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from arena.pipeline import reaper
from arena.pipeline.scenario import ScenarioError

CONNECT_SECONDS = 10.0
"""How long ``connect`` waits for the cluster's address to accept a connection."""
NICENESS_ENV = "RAY_worker_niceness"
_joined: list[bool] = []  # whether ``connect`` joined the cluster this process is connected to


def _host_port(address: str) -> tuple[str, int] | None:
    """The host and port an address names (``host:port``, ``ray://host:port``), or None (``auto``, a path)."""
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return None
    return host.strip("[]"), int(port)


def _refused(address: str, reason: str) -> ScenarioError:
    return ScenarioError([f"--address {address!r}: cannot connect to the Ray cluster: {reason}"])


def connect(address: str, *, verbose: bool = False) -> None:
    """Join the Ray cluster at ``address`` now (once per process): a ``ScenarioError`` naming the address and the
    reason when it cannot be reached or no cluster answers there. Nothing is written anywhere."""
    loaded = sys.modules.get("ray")
    if loaded is not None and loaded.is_initialized():
        return
    target = _host_port(address)
    if target is not None:
        try:
            socket.create_connection(target, timeout=CONNECT_SECONDS).close()
        except OSError as exc:
            raise _refused(address, exc.strerror or str(exc) or type(exc).__name__) from None
    import ray

    level = logging.INFO if verbose else logging.ERROR
    logging.getLogger("ray").setLevel(level)
    try:
        ray.init(address=address, log_to_driver=verbose, logging_level=level)
    except Exception as exc:  # noqa: BLE001 - whatever Ray says about the address, it is the address's problem
        with contextlib.suppress(Exception):
            ray.shutdown()
        raise _refused(address, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}") \
            from None
    _joined.append(True)


@contextlib.contextmanager
def session(address: str | None, workers: int | None, *, verbose: bool = False) -> Iterator[None]:
    """The run's cluster: the one ``connect`` joined (or that the caller started), else a new local one with
    ``workers`` CPUs (default: all); what was started or joined here is shut down at the end."""
    import ray

    ours, watch = bool(_joined), None
    try:
        if not ray.is_initialized():
            ours = True
            if address:
                connect(address, verbose=verbose)
            else:
                level = logging.INFO if verbose else logging.ERROR
                logging.getLogger("ray").setLevel(level)
                system = {} if NICENESS_ENV in os.environ else {"worker_niceness": 0}
                watch = reaper.start()
                ray.init(address="local", num_cpus=workers or os.cpu_count(), include_dashboard=False,
                         log_to_driver=verbose, logging_level=level, object_store_memory=128 * 1024 * 1024,
                         _system_config=system)
                close_session_sockets()
        yield
    finally:
        if ours:
            _joined.clear()
            ray.shutdown()
        reaper.stop(watch)


def close_session_sockets() -> None:
    """The sockets folder of this process's Ray session, closed to other users (attacks' users). Called when the
    arena starts Ray and again on every pass of the driver's loop: a Ray worker started later (a light matchup's
    half CPU starts more of them) makes the folder world-writable again."""
    from arena.pipeline.sandbox.scratch import close_sockets

    with contextlib.suppress(Exception):
        import ray

        node: Any = ray._private.worker._global_node
        close_sockets(node.get_session_dir_path())


# --- the watchdog ---


@dataclass(frozen=True)
class Driver:
    """The driver's process, as a worker recognises it: its machine (boot id and host name), pid and start time."""

    machine: str
    pid: int
    started: str


def _machine() -> str:
    boot = ""
    with contextlib.suppress(OSError), open("/proc/sys/kernel/random/boot_id") as f:
        boot = f.read().strip()
    return f"{socket.gethostname()}/{boot}"


def _started(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot), or None when no such process runs."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2:].split()
    return None if fields[0] in (b"Z", b"X") else fields[19].decode()  # a zombie has ended


def this_driver() -> Driver | None:
    """This process as a driver its workers watch (None where /proc does not say)."""
    started = _started(os.getpid())
    return None if started is None else Driver(_machine(), os.getpid(), started)


_watching: list[threading.Thread] = []


def watch_driver(driver: Driver | None, *, interval: float = 0.5) -> None:
    """In a Ray worker on the driver's machine: start (once per process) a thread that kills this process when the
    driver ends (elsewhere, Ray ends the job's workers)."""
    if _watching or driver is None or driver.machine != _machine():
        return

    def watch() -> None:
        while _started(driver.pid) == driver.started:
            time.sleep(interval)
        os.kill(os.getpid(), signal.SIGKILL)

    thread = threading.Thread(target=watch, name="arena-driver-watchdog", daemon=True)
    thread.start()
    _watching.append(thread)
