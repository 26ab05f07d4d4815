"""Tournaments on Ray: local and a simulated two-node cluster give the serial results; faulty plugins fail alone
(timeouts, serial and under Ray: test_faults.py)."""

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


@hookimpl
def register_attacks(register):
    for cls in (Explode, Crash):
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
"""The timeout of every matchup here. Its clock runs from the start of its process (under Ray, from its submission:
a worker's start and its release's training count too), which a loaded machine makes many times slower."""


def faulty_scenario(path: Path, limits: str, attacks: list[str]) -> Path:
    """TINY on seed 0 without DP, with the run ``limits`` lines and these ``attacks`` (FAULTY's and built-ins)."""
    text = TINY.replace("seeds: [0, 1]", "seeds: [0]\n" + limits)
    text = text.replace(
        "      - {name: threshold-mia}", "\n".join(f"      - {{name: {a}}}" for a in attacks)
    ).replace("      - {name: dpsgd, epsilons: [4], delta: 1.0e-3}\n", "")
    return write_scenario(path, text)


def test_faulty_plugins_fail_only_their_own_matchups(plugin_dist, tmp_path: Path, capsys, ray_session) -> None:
    plugin_dist("arena-faulty", "arena_faulty_plugin", FAULTY)
    patient = faulty_scenario(tmp_path / "faulty.yaml", f"timeout: {PATIENT}\nretries: 1",
                              ["threshold-mia", "explode", "crash"])
    out = tmp_path / "run"
    assert main(["run", str(patient), "--out", str(out), "--workers", "2"]) == 1  # timeouts: test_faults.py
    rows = {r["attack"]: r for r in RunStore(out).results()}
    assert set(rows) == {"threshold-mia", "explode", "crash"}
    assert rows["threshold-mia"]["status"] == "ok" and rows["threshold-mia"]["metrics"]["auc"] > 0.5
    assert rows["explode"]["status"] == "failed" and "boom from a plugin" in rows["explode"]["error"]
    assert "Traceback" in rows["explode"]["traceback"]
    assert rows["crash"]["status"] == "failed" and "worker died" in rows["crash"]["error"]
    printed = capsys.readouterr().out
    assert "FAILED" in printed and "1 ok" in printed and "2 failed" in printed
