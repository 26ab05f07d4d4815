"""Tournaments on Ray: local and a simulated two-node cluster give the serial results; faulty plugins fail alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from arena.cli import main
from arena.pipeline.plan import plan
from arena.pipeline.store import SECRET_ENV, RunStore
from arena.pipeline.tournament import run
from tests.conftest import TINY, write_scenario

FAULTY = """
import os
import time

from arena.contracts.attack import Attack
from arena.hookspecs import hookimpl


class Explode(Attack):
    name = "explode"
    game = "membership"

    def run(self, view):
        raise RuntimeError("boom from a plugin")


class Crash(Attack):
    name = "crash"
    game = "membership"

    def run(self, view):
        os._exit(3)


class Hang(Attack):
    name = "hang"
    game = "membership"

    def run(self, view):
        time.sleep(600)


class Stubborn(Attack):  # hangs, and swallows every Exception it can
    name = "stubborn"
    game = "membership"

    def run(self, view):
        while True:
            try:
                time.sleep(600)
            except Exception:
                pass


@hookimpl
def register_attacks(register):
    for cls in (Explode, Crash, Hang, Stubborn):
        register(cls)
"""


def comparable(store: RunStore) -> dict[str, dict]:
    """Rows by key without the wall-clock column."""
    return {r["key"]: {k: v for k, v in r.items() if k != "seconds"} for r in store.results()}


@pytest.fixture
def ray_session():
    """Shut any Ray instance down after the test, even a failing one."""
    import ray

    yield ray
    ray.shutdown()


def test_ray_local_and_two_node_cluster_match_serial(tiny_scenario: Path, tmp_path: Path, ray_session,
                                                     monkeypatch) -> None:
    from ray.cluster_utils import Cluster

    p = plan([tiny_scenario])
    monkeypatch.setenv(SECRET_ENV, "5e" * 32)  # three run directories, one secret: the same games
    serial, local, cluster_store = (RunStore(tmp_path / name) for name in ("serial", "local", "cluster"))
    for store in (serial, local, cluster_store):
        store.secret()
    run(p, serial, serial=True)
    run(p, local, workers=2)
    assert not ray_session.is_initialized(), "a run that started Ray shuts it down"
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    try:
        run(p, cluster_store, address=cluster.address)
        nodes = [n for n in ray_session.nodes() if n["Alive"]] if ray_session.is_initialized() else []
    finally:
        ray_session.shutdown()
        cluster.shutdown()
    expected = comparable(serial)
    assert len(expected) == len(p.matchups) == 4
    assert all(r["status"] == "ok" for r in expected.values())
    assert comparable(local) == expected
    assert comparable(cluster_store) == expected
    assert len(nodes) in (0, 2)


PATIENT = 180
"""The timeout of every matchup that must end by itself. Its clock runs from the start of its process (under Ray,
from its submission: a worker's start and its release's training count too), which a loaded machine makes many
times slower; a matchup that hangs is given a short timeout in a scenario of its own."""


def faulty_scenario(path: Path, limits: str, attacks: list[str], *, name: str = "tiny", seed: int = 0) -> Path:
    """TINY as scenario ``name`` on ``seed`` without DP, with the run ``limits`` lines and these ``attacks``
    (FAULTY's and built-ins). Another seed is another release: a hanging matchup's timeout, which may strike while
    its release trains, stops no release an honest matchup waits for."""
    text = TINY.replace("name: tiny\n", f"name: {name}\n", 1).replace("seeds: [0, 1]", f"seeds: [{seed}]\n" + limits)
    text = text.replace(
        "      - {name: threshold-mia}", "\n".join(f"      - {{name: {a}}}" for a in attacks)
    ).replace("      - {name: dpsgd, epsilons: [4], delta: 1.0e-3}\n", "")
    return write_scenario(path, text)


def test_faulty_plugins_fail_only_their_own_matchups(plugin_dist, tmp_path: Path, capsys, ray_session) -> None:
    plugin_dist("arena-faulty", "arena_faulty_plugin", FAULTY)
    patient = faulty_scenario(tmp_path / "faulty.yaml", f"timeout: {PATIENT}\nretries: 1",
                              ["threshold-mia", "explode", "crash"])
    hung = faulty_scenario(tmp_path / "hung.yaml", "timeout: 10", ["hang"], name="tiny-hung", seed=1)
    out = tmp_path / "run"
    assert main(["run", str(patient), str(hung), "--out", str(out), "--workers", "2"]) == 1
    rows = {r["attack"]: r for r in RunStore(out).results()}
    assert set(rows) == {"threshold-mia", "explode", "crash", "hang"}
    assert rows["threshold-mia"]["status"] == "ok" and rows["threshold-mia"]["metrics"]["auc"] > 0.5
    assert rows["explode"]["status"] == "failed" and "boom from a plugin" in rows["explode"]["error"]
    assert "Traceback" in rows["explode"]["traceback"]
    assert rows["crash"]["status"] == "failed" and "worker died" in rows["crash"]["error"]
    assert rows["hang"]["status"] == "failed" and rows["hang"]["error"] == "timeout: exceeded 10s"
    printed = capsys.readouterr().out
    assert "FAILED" in printed and "1 ok" in printed and "3 failed" in printed


def test_serial_run_times_out_hung_plugins_and_goes_on(plugin_dist, tmp_path: Path) -> None:
    import signal
    import time

    plugin_dist("arena-faulty", "arena_faulty_plugin", FAULTY)
    # the hung plugins (600 s each) get 10 s, the honest matchup the time a loaded machine may need
    patient = faulty_scenario(tmp_path / "honest.yaml", f"timeout: {PATIENT}", ["threshold-mia"])
    hung = faulty_scenario(tmp_path / "hung.yaml", "timeout: 10", ["hang", "stubborn"], name="tiny-hung", seed=1)
    out = tmp_path / "run"
    handler, timer = signal.getsignal(signal.SIGALRM), signal.getitimer(signal.ITIMER_REAL)
    start = time.monotonic()
    assert main(["run", str(patient), str(hung), "--out", str(out), "--serial", "--no-report"]) == 1
    assert time.monotonic() - start < 300, "the hung plugins were stopped at their timeout, not left to sleep"
    rows = {r["attack"]: r for r in RunStore(out).results()}
    for name in ("hang", "stubborn"):
        assert rows[name]["status"] == "failed" and rows[name]["error"] == "timeout: exceeded 10s"
        assert 10 <= rows[name]["seconds"] < 20
    assert rows["threshold-mia"]["status"] == "ok"
    # the timeout is enforced from outside the matchup's process: the caller's alarm (pytest-timeout's) is untouched
    assert signal.getsignal(signal.SIGALRM) is handler
    assert (signal.getitimer(signal.ITIMER_REAL)[0] > 0) == (timer[0] > 0)
