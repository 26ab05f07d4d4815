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


def test_serial_matchups_share_a_worker_until_a_fault_ends_it(monkeypatch) -> None:
    """``--serial`` plays matchup after matchup in one worker process; a plugin's exit, an interrupt it raised or
    a timeout ends that worker, and the next matchup gets a fresh one (a dead worker's matchup is played again)."""
    import os

    from arena.pipeline import serial

    def play(matchup, run_dir):
        if matchup == "exits":
            os._exit(3)
        if matchup == "raises":
            raise KeyboardInterrupt("plugin")
        if matchup == "hangs":
            __import__("time").sleep(60)
        return {"m": matchup, "pid": os.getpid()}

    monkeypatch.setattr(serial, "play_matchup", play)
    monkeypatch.setattr(serial, "failed_row", lambda matchup, error, seconds: {"m": matchup, "error": error})
    monkeypatch.setattr(serial.sandbox, "start", lambda: None)
    rows: list[dict] = []
    serial.run_serial(["a", "b", "exits", "c", "raises", "d", "hangs", "e"], "unused", rows.append,
                      lambda n: None, lambda m: 1.0 if m == "hangs" else 60.0, retries=0)
    by = {r["m"]: r for r in rows}
    assert [r["m"] for r in rows] == ["a", "b", "exits", "c", "raises", "d", "hangs", "e"]
    assert by["a"]["pid"] == by["b"]["pid"] != os.getpid(), "one worker, reused"
    assert by["exits"]["error"] == "worker died: exit code 3" and by["c"]["pid"] != by["b"]["pid"]
    assert by["raises"]["error"] == "plugin raised KeyboardInterrupt: plugin" and by["d"]["pid"] != by["c"]["pid"]
    assert by["hangs"]["error"] == "timeout: exceeded 1s" and by["e"]["pid"] != by["d"]["pid"]


def test_a_module_only_some_matchups_need_is_imported_for_the_next_worker_never_after_the_last(monkeypatch):
    """A serial run forks its workers from one process: what a worker imported of ``LEARNED`` (Dynamo, ~2 s) is
    imported there before the next worker starts, so later workers start with it; a run none of whose matchups
    needs it never pays for it, nor does a run whose worker keeps its own."""
    import sys

    from arena.pipeline import serial

    monkeypatch.setattr(serial, "LEARNED", ("colorsys",))
    monkeypatch.setattr(serial, "play_matchup", lambda matchup, run_dir: __import__("colorsys") and {"m": matchup})
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    worker = serial.Worker("unused")
    try:
        assert worker.play("one", 60) == ({"m": "one"}, False, ["colorsys"])
        assert worker.play("two", 60) == ({"m": "two"}, False, ["colorsys"])
    finally:
        worker.close()
    assert "colorsys" not in sys.modules, "the worker's import is its own"

    seen = []

    class Fake:  # what the parent had imported when each worker forked; "exits" ends its worker
        def __init__(self, run_dir: str) -> None:
            seen.append("colorsys" in sys.modules)
            self.live = True

        def play(self, matchup, limit):
            self.live = matchup != "exits"
            return {"m": matchup}, False, ["colorsys"] if matchup in ("needs it", "exits") else []

        def alive(self) -> bool:
            return self.live

        def close(self, wait: float = 0.0) -> None:
            self.live = False

    monkeypatch.setattr(serial, "Worker", Fake)
    monkeypatch.setattr(serial.sandbox, "start", lambda: None)
    rows = []
    serial.run_serial(["needs it", "exits"], "unused", rows.append, lambda n: None, lambda m: 60)
    assert seen == [False] and "colorsys" not in sys.modules, "nothing is imported after the last matchup"
    serial.run_serial(["needs it", "next", "exits", "last"], "unused", rows.append, lambda n: None, lambda m: 60)
    assert seen == [False, False, True] and len(rows) == 6


def _matchup(release: str, threat: frozenset[str] | None):
    from types import SimpleNamespace

    return SimpleNamespace(release_key=release, attack=SimpleNamespace(threat_model=threat))


def test_tasks_hold_the_cpus_they_use_and_matchups_sharing_a_pool_never_run_at_once() -> None:
    from arena.pipeline.tournament import LIGHT_CPUS, LOOKAHEAD, TRAIN_CPUS, cpus, next_matchup

    light, trains = frozenset({"query"}), frozenset({"query", "training"})
    score_a, pool_a, pool_a2 = _matchup("a", light), _matchup("a", trains), _matchup("a", trains)
    score_b, pool_b, unknown = _matchup("b", light), _matchup("b", trains), _matchup("c", None)
    assert (cpus(score_a), cpus(pool_a), cpus(unknown)) == (LIGHT_CPUS, TRAIN_CPUS, TRAIN_CPUS) == (0.5, 1.0, 1.0)
    ab = {"a", "b"}  # both releases trained
    # the second trainer of a's pool waits for the first; b's scoring and b's pool fill the cores meanwhile
    assert next_matchup([pool_a2, score_b, pool_b], [pool_a], 2.0, ab) == 1
    assert next_matchup([pool_a2, pool_b], [pool_a], 2.0, ab) == 1
    assert next_matchup([pool_a2, pool_b], [pool_a, score_a, score_b], 2.0, ab) is None, "no CPU left"
    assert next_matchup([pool_a2], [pool_a], 4.0, ab) is None, "never beside its pool's trainer"
    assert next_matchup([pool_a2], [score_a], 2.0, ab) == 0, "scoring shares no pool"
    assert next_matchup([score_a, score_b], [pool_b, score_a], 2.0, ab) == 0, "half a CPU fits"
    assert next_matchup([pool_b], [], 0.5, ab) == 0, "with nothing running the first starts, whatever its size"
    assert next_matchup([], [pool_a], 2.0, ab) is None
    far = [pool_a2] * LOOKAHEAD + [score_b]
    assert next_matchup(far, [pool_a], 2.0, ab) is None, "the driver looks only so far ahead"
    assert next_matchup(far[1:], [pool_a], 2.0, ab) == LOOKAHEAD - 1


def test_a_light_matchup_holds_a_whole_cpu_until_its_release_is_trained() -> None:
    """Its release's task takes a whole CPU while the matchup's clock runs: on one CPU, a second matchup let in
    beside it would keep that release from starting (the Ray fault test's honest matchups timed out so)."""
    from arena.pipeline.tournament import LIGHT_CPUS, TRAIN_CPUS, held, next_matchup

    score_a, score_a2, score_b = (_matchup(k, frozenset({"query"})) for k in ("a", "a", "b"))
    assert (held(score_a, set()), held(score_a, {"a"})) == (TRAIN_CPUS, LIGHT_CPUS)
    assert next_matchup([score_a2, score_b], [score_a], 1.0, set()) is None, "a's release is not trained yet"
    assert next_matchup([score_b, score_a2], [score_a], 1.0, {"a"}) == 1, "b's is not either; a's is"
    assert next_matchup([score_b], [score_a], 1.0, {"a", "b"}) == 0
    assert next_matchup([score_b], [score_a], 1.5, {"a"}) == 0, "a whole CPU is left for b's release"
