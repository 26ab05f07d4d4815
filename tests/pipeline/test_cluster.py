"""The Ray cluster a run plays on (``arena.pipeline.cluster``): a bad ``--address`` is refused before anything is
written; the driver's watchdog; the reaper of a local cluster (``arena.pipeline.reaper``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from arena.cli import EXIT_INPUT, main
from arena.pipeline import cluster, reaper

SCENARIO = """
name: tiny
seeds: [0]
tracks:
  - name: t
    dataset: {name: digits}
    model: {name: logreg}
    training: {epochs: 1, batch_size: 32, lr: 0.1}
    game: {name: membership, members: 20, test: 40, population: 60}
    defenses:
      - {name: nonprivate}
    attacks:
      - {name: threshold-mia}
"""


def closed_port() -> int:
    """A local port that nothing listens on (it was just bound and released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_an_unreachable_address_is_exit_2_with_nothing_written(tmp_path: Path, capsys) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(SCENARIO))
    out = tmp_path / "run"
    address = f"127.0.0.1:{closed_port()}"
    assert main(["run", str(path), "--out", str(out), "--address", address]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert err.strip() == f"--address {address!r}: cannot connect to the Ray cluster: Connection refused", err
    assert "Traceback" not in err and not out.exists(), "nothing written"


def test_addresses_are_read_as_host_and_port() -> None:
    assert cluster._host_port("10.0.0.5:6379") == ("10.0.0.5", 6379)
    assert cluster._host_port("ray://head:10001") == ("head", 10001)
    assert cluster._host_port("[::1]:6379") == ("::1", 6379)
    assert cluster._host_port("auto") is None and cluster._host_port("head:port") is None


def test_the_watchdog_recognises_a_driver_by_its_pid_and_start_time() -> None:
    me = cluster.this_driver()
    assert me is not None and me.pid == os.getpid()
    assert cluster._started(os.getpid()) == me.started
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert cluster._started(child.pid) is None, "a process that ended is no driver"


@pytest.mark.subprocess
def test_the_reaper_kills_what_a_killed_driver_started_and_stands_down_when_told(tmp_path: Path) -> None:
    """A driver (a fresh interpreter) starts the reaper, then a child in a session of its own (as Ray's processes
    outlive their driver); killed with SIGKILL, its child is gone within seconds. A driver that stands its reaper
    down leaves its children alone."""
    pidfile = tmp_path / "pid"
    script = textwrap.dedent(f"""
        import subprocess, sys, time
        from arena.pipeline import reaper
        watch = reaper.start()
        child = subprocess.Popen(["sleep", "300"], start_new_session=True)
        open({str(pidfile)!r}, "w").write(str(child.pid))
        time.sleep(float(sys.argv[1]))
        reaper.stop(watch)
        time.sleep(300)
    """)
    for stand_down in (False, True):
        pidfile.unlink(missing_ok=True)
        driver = subprocess.Popen([sys.executable, "-c", script, "1" if stand_down else "300"])
        try:
            deadline = time.monotonic() + 60
            while not pidfile.exists() or not pidfile.read_text():
                assert time.monotonic() < deadline and driver.poll() is None
                time.sleep(0.1)
            child = int(pidfile.read_text())
            time.sleep(2.5)  # noted (once a second), and, when told, stood down
            driver.kill()
            driver.wait()
            deadline = time.monotonic() + 10
            while cluster._started(child) is not None and time.monotonic() < deadline:
                time.sleep(0.1)
            gone = cluster._started(child) is None
            assert gone != stand_down, "killed with its driver, unless the reaper stood down"
        finally:
            driver.kill()
            if cluster._started(int(pidfile.read_text() or 0)) is not None:
                os.kill(int(pidfile.read_text()), 9)
    assert reaper.STAND_DOWN == b"q"


SLEEPER = '''
import os, time

import numpy as np

from arena import Attack, MembershipGuess, hookimpl


class Sleeper(Attack):
    name = "sleeper"
    game = "membership"
    threat_model = frozenset({"query"})

    def run(self, view):
        open(os.path.join(os.environ["SLEEPER_DIR"], f"started.{os.getpid()}"), "w").close()
        time.sleep(300)
        n = len(view.challenge_y)
        return MembershipGuess(scores=np.zeros(n), decisions=np.zeros(n, dtype=bool))


@hookimpl
def register_attacks(register):
    register(Sleeper)
'''


def session_processes(sid: int, pids: list[int]) -> list[str]:
    """Processes of the session ``sid`` (zombies left out: they have ended), and those of ``pids`` still running."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes()
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")[:100]
            except OSError:
                continue
            fields = stat[stat.rindex(b")") + 2:].split()
            if fields[0] not in (b"Z", b"X") and (int(fields[3]) == sid or int(entry) in pids):
                found.append(f"{entry}: {cmd.decode(errors='replace')}")
    return found


def niceness(pids: list[int]) -> list[int]:
    """The nice value of each process (``/proc/<pid>/stat``'s 19th field)."""
    out = []
    for pid in pids:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        out.append(int(stat[stat.rindex(b")") + 2:].split()[16]))
    return out


@pytest.mark.ray
@pytest.mark.slow
def test_arena_run_killed_under_ray_leaves_no_process_10_seconds_later(plugin_dist, tmp_path: Path) -> None:
    """``arena run`` on a local Ray cluster, killed with SIGKILL while two attacks run: 10 s later no process of
    its session (Ray's head, agents and workers, the fork servers) and no attack's process remains. Its workers,
    and the attacks they start, ran at the driver's priority (Ray's default adds 15)."""
    plugin_dist("arena-sleeper", "arena_sleeper", SLEEPER)
    notes = Path(tempfile.mkdtemp(prefix="arena-sleeper-"))
    notes.chmod(0o777)
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(SCENARIO.replace("seeds: [0]", "seeds: [0, 1]\ntimeout: 600")
                                    .replace("threshold-mia", "sleeper")))
    env = {k: v for k, v in os.environ.items() if k != cluster.NICENESS_ENV}  # the arena's own choice
    env["SLEEPER_DIR"] = str(notes)
    driver = subprocess.Popen([sys.executable, "-m", "arena.cli", "run", str(path), "--out", str(tmp_path / "run"),
                               "--workers", "2", "--no-report"], env=env, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 400
        while len(list(notes.glob("started.*"))) < 2:
            assert driver.poll() is None and time.monotonic() < deadline, "the run ended before its attacks ran"
            time.sleep(0.2)
        attacks = [int(p.suffix[1:]) for p in notes.glob("started.*")]
        assert session_processes(driver.pid, attacks), "the run's processes are there"
        own = os.nice(0)
        assert niceness(attacks) == [own, own], "the workers (and so their attacks) at the arena's priority, not 15"
        driver.kill()
        driver.wait()
        killed = time.monotonic()
        while (left := session_processes(driver.pid, attacks)) and time.monotonic() - killed < 10:
            time.sleep(0.2)
        assert left == [], left
    finally:
        with contextlib.suppress(OSError):
            os.killpg(driver.pid, signal.SIGKILL)
        shutil.rmtree(notes, ignore_errors=True)

