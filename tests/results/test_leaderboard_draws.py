"""Bootstrap draws drawn once, when a matchup is scored, and read back by the leaderboard: the same draws the board
would draw from the saved scores (the game's ``resample``, seeded by the key), read without the arrays or the
plugins; a board asking for other draws, or a run that saved none, resamples. The DP audit's findings are kept in
the run directory under the digest of the rows and code they came from."""

from __future__ import annotations

import json

import numpy as np
import pytest

from arena.engine.seeds import RESAMPLES, resample_seed
from arena.games.membership.metrics import resample
from arena.results import leaderboard
from arena.results.audit import saved_arrays
from arena.results.leaderboard.findings import FILE, cached_findings
from tests.results.test_leaderboard_metrics import make_run


def _save_draws(store) -> None:
    from arena.contracts.game import Outcome
    from arena.games.membership.game import MembershipGame
    from arena.pipeline.execute import bootstrap_draws

    arrays = saved_arrays(store)
    for r in store.results():
        outcome = Outcome(r["metrics"], arrays=dict(arrays(r["key"])))
        store.save_draws(r["key"], bootstrap_draws(MembershipGame, outcome, r["key"]))


def _intervals(board) -> dict:
    return {(m, cell): (iv.method, iv.low, iv.high) for m, g in board.grids.items() for cell, iv in g.intervals.items()}


def test_saved_draws_are_the_boards_own_and_are_read_without_the_arrays(tmp_path) -> None:
    store = make_run(tmp_path / "run")
    _save_draws(store)
    rows = store.results()
    (resampled,) = leaderboard.build(rows, arrays=saved_arrays(store))

    def no_arrays(key: str):
        raise AssertionError(f"the arrays of {key} were read although its draws were saved")

    (read,) = leaderboard.build(rows, arrays=no_arrays, draws=store.load_draws)
    assert _intervals(read) == _intervals(resampled)  # the very same intervals, to the last bit
    assert {iv.method for iv in read.intervals.values()} == {"bootstrap"}
    assert "drawn when each matchup was scored" in read.interval_method
    key = rows[0]["key"]
    saved = store.load_draws(key)
    expected = resample(saved_arrays(store)(key), list(rows[0]["metrics"]), resamples=RESAMPLES,
                        seed=resample_seed(key))
    assert set(saved) == set(expected) and all(np.array_equal(saved[m], expected[m]) for m in saved)


def test_other_draws_or_a_run_without_saved_draws_resample_the_scores(tmp_path) -> None:
    store = make_run(tmp_path / "run")
    rows = store.results()
    read: list[str] = []

    def arrays(key: str):
        read.append(key)
        return saved_arrays(store)(key)

    (board,) = leaderboard.build(rows, arrays=arrays, draws=store.load_draws)  # saved none: resampled
    assert {iv.method for iv in board.intervals.values()} == {"bootstrap"} and len(set(read)) == len(rows)
    assert "resampled from the saved scores" in board.interval_method
    _save_draws(store)
    read.clear()
    (other,) = leaderboard.build(rows, arrays=arrays, draws=store.load_draws, resamples=200)  # not what was saved
    assert len(set(read)) == len(rows) and other.intervals != board.intervals


@pytest.mark.slow
def test_play_matchup_saves_the_draws_beside_the_row(tiny_scenario, tmp_path) -> None:
    from arena import api

    results = api.run(tiny_scenario, tmp_path / "run", serial=True, report=False)
    ok = [r for r in results.rows if r["status"] == "ok"]
    assert ok
    arrays = results.arrays()
    for r in ok:
        saved = results.store.load_draws(r["key"])
        assert saved is not None and all(v.shape == (RESAMPLES,) for v in saved.values())
        assert {"auc", "advantage", "tpr@10%fpr"} <= set(saved)
        again = resample(arrays(r["key"]), list(r["metrics"]), resamples=RESAMPLES, seed=resample_seed(r["key"]))
        assert all(np.array_equal(saved[m], again[m]) for m in saved)


def test_audit_findings_are_kept_under_the_digest_of_their_rows(tmp_path) -> None:
    store = make_run(tmp_path / "run")
    rows = store.results()
    calls: list[int] = []

    def audit() -> dict[str, str]:
        calls.append(1)
        return {rows[0]["key"]: "empirical ε ≥ 2.000 > claimed ε = 1.000"}

    first = cached_findings(store.root, rows, audit)
    assert cached_findings(store.root, rows, audit) == first and len(calls) == 1  # read back, not audited again
    kept = json.loads((store.root / FILE).read_text())
    assert kept["findings"] == first and len(kept["digest"]) == 64
    changed = [{**rows[0], "versions": {"attack": "x 2.0"}}, *rows[1:]]  # a re-played matchup, a new version
    cached_findings(store.root, changed, audit)
    assert len(calls) == 2
    (store.root / FILE).write_text("not json")
    assert cached_findings(store.root, changed, audit) == first and len(calls) == 3  # unreadable: audited again


@pytest.mark.parametrize("violating", [False, True])
def test_the_boards_marks_come_from_the_kept_findings(tmp_path, violating: bool) -> None:
    from arena import api

    store = make_run(tmp_path / "run")
    results = api.load(store.root)
    findings = results.findings()
    assert findings == {}  # no claims in this run: nothing to flag
    if violating:  # a finding kept for exactly these rows marks the board
        key = results.rows[0]["key"]
        cached_findings(store.root, results.rows, lambda: {})
        data = json.loads((store.root / FILE).read_text())
        data["findings"] = {key: "empirical ε ≥ 9 > claimed ε = 1"}
        (store.root / FILE).write_text(json.dumps(data))
        (board,) = api.load(store.root).boards()
        assert any("VIOLATION" in str(c) for c in board.cells.to_numpy().ravel())
