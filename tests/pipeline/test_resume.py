"""Resume: a run killed with SIGKILL (or stopped with Ctrl-C) and re-run gives the uninterrupted results and
re-trains nothing that had finished; results.jsonl survives a torn last line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from arena.pipeline.store import SECRET_ENV, RunStore
from tests.conftest import TINY, write_scenario

SLOW = TINY.replace("seeds: [0, 1]", "seeds: [0, 1, 2, 3]").replace("epochs: 5", "epochs: 40")


def _interruptible() -> None:
    """In the child before exec: Ctrl-C as a terminal delivers it (default disposition, not blocked), whatever an
    earlier test left in this process (an ignored or blocked SIGINT is inherited across exec)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def arena(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "arena.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_interruptible)


def wait_for_rows(store: RunStore, n: int, proc: subprocess.Popen, limit: float = 300.0) -> None:
    """Until ``store`` holds ``n`` rows; ``limit`` only bounds a failing test (a loaded machine is slow, not stuck)."""
    deadline = time.monotonic() + limit
    while len(store.results()) < n:
        assert proc.poll() is None, "the run ended before it could be interrupted"
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.05)


def children(pid: int) -> list[int]:
    """The processes ``pid`` started (Linux's /proc)."""
    return [int(c) for task in Path(f"/proc/{pid}/task").iterdir()
            for c in (task / "children").read_text().split()]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by whoever adopted it, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def comparable(store: RunStore) -> dict[str, dict]:
    return {r["key"]: {k: v for k, v in r.items() if k != "seconds"} for r in store.results()}


def snapshot(cache: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in cache.rglob("*.safetensors")}


RESUME_SECRET = "5e" * 32
"""The run secret of the uninterrupted run and of the killed ones compared with it."""


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict]]:
    """The ``SLOW`` scenario and the rows of its uninterrupted serial run, played once for both modes."""
    from arena.cli import main

    folder = tmp_path_factory.mktemp("uninterrupted")
    scenario = write_scenario(folder / "slow.yaml", SLOW)
    whole = RunStore(folder / "whole")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(SECRET_ENV, RESUME_SECRET)
        assert main(["run", str(scenario), "--out", str(whole.root), "--serial", "--no-report"]) in (0, 1)
    return scenario, comparable(whole)


@pytest.mark.subprocess
@pytest.mark.parametrize("mode", [["--serial"], pytest.param(["--workers", "2"], marks=[pytest.mark.ray,
                                                                                      pytest.mark.slow])],
                         ids=["serial", "ray"])
def test_kill_9_then_resume_gives_uninterrupted_results_without_retraining(
        tmp_path: Path, monkeypatch, mode: list[str], uninterrupted: tuple[Path, dict[str, dict]]) -> None:
    """Serially and under Ray (the killed driver's cluster, workers and attacks end with it): the resumed run's rows
    are the uninterrupted serial run's."""
    monkeypatch.setenv(SECRET_ENV, RESUME_SECRET)  # two run directories compared: one secret
    from arena.cli import main

    scenario, whole = uninterrupted  # the uninterrupted run and the resumed one play in this process
    killed = RunStore(tmp_path / "killed")
    proc = arena("run", str(scenario), "--out", str(killed.root), *mode, "--no-report")
    wait_for_rows(killed, 3, proc, limit=900.0)  # Ray's start on a loaded machine
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = comparable(killed)
    assert 3 <= len(before) < len(whole)
    cached = snapshot(killed.root / "cache")

    assert main(["run", str(scenario), "--out", str(killed.root), *mode, "--no-report"]) in (0, 1)
    after = comparable(killed)
    assert after == whole
    assert len(killed.results()) == len(after), "no finished matchup was played twice"
    unchanged = snapshot(killed.root / "cache")
    assert all(unchanged[p] == t for p, t in cached.items()), "a finished model was trained again"


HANGING_ARENA = """
import time
from arena.pipeline import serial
serial.play_matchup = lambda matchup, run_dir: time.sleep(120)  # a matchup that plays on for two minutes
serial.Worker("unused").play(None, 300)
"""


@pytest.mark.subprocess
def test_a_serial_matchup_dies_with_its_killed_arena(tmp_path: Path) -> None:
    """Else it plays on, holding the run directory's lock: the resumed run is refused as "in use"."""
    proc = subprocess.Popen([sys.executable, "-c", HANGING_ARENA])
    deadline = time.monotonic() + 120  # bounds a failing test only
    while not (playing := children(proc.pid)):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in playing) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in playing if alive(pid)], "the matchup's process outlived the arena"


@pytest.mark.subprocess
def test_ctrl_c_stops_cleanly_with_status_130(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "slow.yaml", SLOW)
    store = RunStore(tmp_path / "run")
    proc = arena("run", str(scenario), "--out", str(store.root), "--serial")
    wait_for_rows(store, 1, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)  # bounds a failing test only: a loaded machine stops slowly
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert len(store.results()) >= 1


def test_torn_last_line_is_ignored_and_repaired(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.append_result({"key": "a", "status": "ok"})
    with open(store.results_path, "a") as f:
        f.write('{"key": "b", "sta')
    assert [r["key"] for r in store.results()] == ["a"]
    store.append_result({"key": "c", "status": "ok"})
    assert [r["key"] for r in store.results()] == ["a", "c"]
    assert store.results_path.read_text().count("\n") == 2


@pytest.mark.slow
def test_rerun_of_a_finished_run_plays_nothing(tmp_path: Path, tiny_scenario: Path) -> None:
    from arena.pipeline.plan import plan
    from arena.pipeline.tournament import pending, run

    store = RunStore(tmp_path / "run")
    p = plan([tiny_scenario])
    assert len(run(p, store, serial=True)) == 4
    assert pending(p, store) == []
    assert run(p, store, serial=True) == []
    assert os.path.getsize(store.results_path) > 0


def test_a_matchup_two_scenarios_list_is_played_once_as_the_last_of_them(tmp_path: Path, tiny_scenario: Path) -> None:
    from arena.pipeline.plan import plan
    from arena.pipeline.tournament import matchup_records, pending

    text = tiny_scenario.read_text().replace("name: tiny\n", "name: other\n", 1)
    other = write_scenario(tmp_path / "other.yaml", text)
    p = plan([tiny_scenario, other])
    assert len(p.matchups) == 8
    todo = pending(p, RunStore(tmp_path / "run"))
    assert len(todo) == 4 and len({m.key for m in todo}) == 4
    assert {m.scenario for m in todo} == {"other"} == {r["scenario"] for r in matchup_records(p).values()}
    assert len(pending(p, RunStore(tmp_path / "run"), fresh=True)) == 4


@pytest.mark.slow
def test_cli_rerun_keeps_the_report_it_already_wrote(tmp_path: Path, tiny_scenario: Path, capsys) -> None:
    from arena.cli import main

    out = tmp_path / "run"
    assert main(["run", str(tiny_scenario), "--out", str(out), "--serial"]) == 0
    report = out / "report" / "index.html"
    written = report.stat().st_mtime_ns
    capsys.readouterr()
    assert main(["run", str(tiny_scenario), "--out", str(out), "--serial"]) == 0
    assert "no new results since it was written" in capsys.readouterr().out
    assert report.stat().st_mtime_ns == written
