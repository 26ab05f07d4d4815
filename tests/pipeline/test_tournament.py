"""Tournaments on Ray: local and a simulated two-node cluster give the serial results (faulty plugins, serially
and under Ray: test_faults.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from arena.pipeline.plan import plan
from arena.pipeline.store import SECRET_ENV, RunStore
from arena.pipeline.tournament import run


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


def test_a_module_only_some_matchups_need_is_imported_for_the_next_child_never_after_the_last(monkeypatch):
    """A serial run forks its matchups from one process: what a child imported of ``LEARNED`` (Dynamo, ~2 s) is
    imported there before the next child starts, so later children start with it; a run none of whose matchups
    needs it never pays for it."""
    import sys
    from types import SimpleNamespace

    from arena.pipeline import tournament

    monkeypatch.setattr(tournament, "LEARNED", ("colorsys",))
    monkeypatch.setattr(tournament, "play_matchup", lambda matchup, run_dir: __import__("colorsys") and {"m": matchup})
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    row, died, imported = tournament.play_in_child("one", "unused", 60)
    assert (row, died, imported) == ({"m": "one"}, False, ["colorsys"])
    assert "colorsys" not in sys.modules, "the child's import is its own"

    seen = []

    def play(matchup, run_dir, limit):  # what the parent had imported when each child forked
        seen.append("colorsys" in sys.modules)
        return {"m": matchup}, False, ["colorsys"] if matchup == "needs it" else []

    monkeypatch.setattr(tournament, "play_in_child", play)
    monkeypatch.setattr(tournament.sandbox, "start", lambda: None)
    monkeypatch.setattr(tournament, "_by_release", lambda todo: {"one release": todo})
    rows = []
    tournament.run_serial(["needs it"], SimpleNamespace(root="unused"), rows.append, lambda n: None, lambda m: 60)
    assert seen == [False] and "colorsys" not in sys.modules, "nothing is imported after the last matchup"
    tournament.run_serial(["needs it", "next", "last"], SimpleNamespace(root="unused"), rows.append,
                          lambda n: None, lambda m: 60)
    assert seen == [False, False, True, True] and len(rows) == 4
