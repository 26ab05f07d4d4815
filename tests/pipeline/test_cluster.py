"""The Ray cluster a run plays on (``arena.pipeline.cluster``): a bad ``--address`` is refused before anything is
written; the driver's watchdog; the reaper of a local cluster (``arena.pipeline.reaper``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
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
