"""One benchmark across runs: rows of the same track, defense and attack definition pool their seeds across run
directories made with different secrets; the same experiment (same secret, same matchup) counts once;
conflicting definitions under one name (a track, a label) are shown apart, never averaged; the DP audit is each
run's own."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

import arena
from arena.cli import EXIT_INPUT, EXIT_OK, main
from arena.pipeline.store import RunStore
from arena.results import leaderboard
from arena.results.audit import Audit, GameAudit
from arena.results.merge import check_runs, line_hashes, merge
from tests.results.benchmark_runs import two_runs  # noqa: F401 - a fixture


@pytest.fixture(autouse=True)
def _no_suite_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading several runs: each has its own secret, so the suite's fixed ARENA_RUN_SECRET must not apply."""
    monkeypatch.delenv("ARENA_RUN_SECRET", raising=False)


def run_dir(tmp_path: Path, name: str, secret: str | None) -> Path:
    root = tmp_path / name
    root.mkdir()
    (root / "results.jsonl").write_text("")
    if secret is not None:
        (root / ".arena-secret").write_text(secret * 32 + "\n")
    return root


def row(key: str, *, track: str = "t", tdef: str = "T1", defense: str = "nonprivate", ddef: str = "D1",
        attack: str = "threshold-mia", adef: str = "A1", seed: int = 0, auc: float = 0.6, utility: float = 0.9,
        definition: bool = True) -> dict:
    r = {"key": key, "release_key": f"rel-{key}", "scenario": "s", "track": track, "game": "membership",
         "defense": defense, "defense_label": defense, "attack": attack, "attack_label": attack, "seed": seed,
         "status": "ok", "utility": utility, "metrics": {"auc": auc, "n_members": 100, "n_nonmembers": 100},
         "metric_info": {"auc": {"higher_is_better": True, "bounds": [0.0, 1.0]}}, "primary_metric": "auc",
         "rank_metric": "auc", "defense_params": {}, "attack_params": {}, "versions": {}}
    if definition:
        r["definition"] = {"track": tdef * 12, "defense": ddef * 12, "attack": adef * 12}
    return r


def board_of(rows: list[dict], track: str):
    return next(b for b in leaderboard.build(rows) if b.track == track)


def test_seeds_of_one_definition_pool_across_runs_with_different_secrets(tmp_path: Path) -> None:
    a, b = run_dir(tmp_path, "a", "a1"), run_dir(tmp_path, "b", "b2")
    merged = merge([(a, [row("k0", auc=0.6, utility=0.8), row("k1", seed=1, auc=0.7, utility=0.8)], None),
                    (b, [row("k0", auc=0.8, utility=0.9)], None)])  # seed 0 of another secret: another experiment
    assert len(merged.rows) == 3 and len({r["key"] for r in merged.rows}) == 3
    assert [r["source_key"] for r in merged.rows] == ["k0", "k1", "k0"]
    assert [r["run"] for r in merged.rows] == ["a", "a", "b"]
    board = board_of(merged.rows, "t")
    assert board.grids["auc"].seeds["nonprivate", "threshold-mia"] == 3
    assert board.means.loc["nonprivate", "threshold-mia"] == pytest.approx(0.7)
    assert board.utility["nonprivate"] == pytest.approx((0.8 + 0.8 + 0.9) / 3)  # per release, per run
    assert merged.warnings == [] and merged.tracks == {"t": ["t"]}


def test_the_same_experiment_in_two_directories_counts_once(tmp_path: Path) -> None:
    a, copy = run_dir(tmp_path, "a", "a1"), run_dir(tmp_path, "copy", "a1")  # the same secret: the same challenger
    merged = merge([(a, [row("k0"), row("k1", seed=1)], None), (copy, [row("k0"), row("k2", seed=2)], None)])
    assert sorted(r["source_key"] for r in merged.rows) == ["k0", "k1", "k2"]
    assert (merged.runs[1].rows, merged.runs[1].duplicates) == (1, 1)
    assert merged.warnings == ["copy: 1 row(s) are the same experiments (same secret and matchup) as rows of a: "
                               "counted once"]


def test_a_track_name_with_two_definitions_becomes_two_tracks(tmp_path: Path) -> None:
    a, b = run_dir(tmp_path, "a", "a1"), run_dir(tmp_path, "b", "b2")
    merged = merge([(a, [row("k0", tdef="T1", auc=0.6)], None), (b, [row("k9", tdef="T2", auc=0.9)], None)])
    names = ["t@" + "T1" * 4, "t@" + "T2" * 4]
    assert [r["track"] for r in merged.rows] == names and merged.tracks == {"t": names}
    assert [r["source_track"] for r in merged.rows] == ["t", "t"]
    boards = {b.track: b for b in leaderboard.build(merged.rows)}
    assert set(boards) == set(names)  # never averaged: 0.6 and 0.9 each alone
    assert [boards[n].means.loc["nonprivate", "threshold-mia"] for n in names] == [0.6, 0.9]
    assert any("track 't' has 2 definitions" in w and "(a)" in w and "(b)" in w for w in merged.warnings)


def test_two_configurations_under_one_label_are_shown_apart(tmp_path: Path) -> None:
    a, b = run_dir(tmp_path, "a", "a1"), run_dir(tmp_path, "b", "b2")
    # the attack's version changed between the runs: another definition under the same label
    merged = merge([(a, [row("k0", adef="A1", auc=0.6)], None), (b, [row("k1", adef="A2", auc=0.9)], None)])
    labels = [r["attack_label"] for r in merged.rows]
    assert labels == ["threshold-mia@" + "A1" * 4, "threshold-mia@" + "A2" * 4]
    board = board_of(merged.rows, "t")
    assert list(board.means.columns) == sorted(labels) and board.grids["auc"].seeds == {
        ("nonprivate", labels[0]): 1, ("nonprivate", labels[1]): 1}
    assert any("2 attack configurations are labelled 'threshold-mia'" in w for w in merged.warnings)


def test_one_configuration_labelled_differently_keeps_its_first_label(tmp_path: Path) -> None:
    a, b = run_dir(tmp_path, "a", "a1"), run_dir(tmp_path, "b", "b2")
    other = {**row("k1"), "defense_label": "nonprivate(training.epochs=3)"}  # the same definition, relabelled
    merged = merge([(a, [row("k0")], None), (b, [other], None)])
    assert [r["defense_label"] for r in merged.rows] == ["nonprivate", "nonprivate"]
    assert merged.rows[1]["source_defense_label"] == "nonprivate(training.epochs=3)"
    assert board_of(merged.rows, "t").grids["auc"].seeds["nonprivate", "threshold-mia"] == 2


def test_rows_without_a_definition_are_their_runs_own(tmp_path: Path) -> None:
    a, b = run_dir(tmp_path, "a", "a1"), run_dir(tmp_path, "b", None)  # schema 1 rows; a run without a secret
    merged = merge([(a, [row("k0", definition=False)], None), (b, [row("k0", definition=False)], None)])
    assert len({r["track"] for r in merged.rows}) == 2 and all(r["track"].startswith("t@") for r in merged.rows)


def test_the_audit_is_each_runs_own_with_merged_keys(tmp_path: Path) -> None:
    a, b = run_dir(tmp_path, "a", "a1"), run_dir(tmp_path, "b", "b2")
    audit = Audit({"membership": GameAudit("membership", findings={"k0": "violation!"}, lines=("one line",),
                                           tested=1)})
    merged = merge([(a, [row("k0")], audit), (b, [row("k0")], None)])
    found = merged.audit()
    assert found.games["membership"].findings == {merged.rows[0]["key"]: "violation!"}
    assert found.games["membership"].lines == ("a: one line",) and found.tested == 1


def test_the_content_hash_is_that_of_the_rows_line(tmp_path: Path) -> None:
    s = RunStore(tmp_path / "run")  # writes a line as a run does
    s.append_result(row("k0"))
    line = (tmp_path / "run" / "results.jsonl").read_bytes().rstrip(b"\n")
    assert line_hashes(tmp_path / "run") == {"k0": hashlib.sha256(line).hexdigest()}


def test_run_directories_that_cannot_merge_are_named(tmp_path: Path) -> None:
    a = run_dir(tmp_path, "a", "a1")
    (tmp_path / "empty").mkdir()
    bad = run_dir(tmp_path, "bad", "a1")
    (bad / ".arena-secret").write_text("not hex\n")
    problems = check_runs([a, tmp_path / "absent", tmp_path / "empty", a, bad])
    assert problems[0] == f"{tmp_path / 'absent'}: no results.jsonl here (not a directory)"
    assert problems[1] == f"{tmp_path / 'empty'}: no results.jsonl here"
    assert problems[2] == f"{a}: given twice"
    assert "a run secret is 64 hexadecimal digits" in problems[3] and len(problems) == 4
    assert main(["leaderboard", str(a), str(tmp_path / "absent")]) == EXIT_INPUT


@pytest.mark.slow
def test_two_real_runs_with_different_secrets_merge_into_one_board(two_runs, capsys) -> None:  # noqa: F811
    a, b = two_runs.a, two_runs.b
    assert (a / ".arena-secret").read_text() != (b / ".arena-secret").read_text()
    assert main(["leaderboard", str(a), str(b), "--format", "json", "--metric", "auc"]) == EXIT_OK
    captured = capsys.readouterr()
    boards = {x["track"]: x for x in json.loads(captured.out)}
    clash = sorted(t for t in boards if t.startswith("clash@"))
    assert set(boards) == {"shared", *clash} and len(clash) == 2  # the conflicting track kept apart
    assert "track 'clash' has 2 definitions across the runs" in captured.err
    assert boards["shared"]["seeds"] == 2 and [boards[t]["seeds"] for t in clash] == [1, 1]  # seeds pooled

    alone = [arena.load(a).frame().set_index("track"), arena.load(b).frame().set_index("track")]
    aucs = [x.loc["shared", "auc"] for x in alone]
    assert boards["shared"]["cells"]["nonprivate"]["threshold-mia"] == pytest.approx(sum(aucs) / 2)
    assert sorted(boards[t]["cells"]["nonprivate"]["threshold-mia"] for t in clash) == pytest.approx(sorted(
        x.loc["clash", "auc"] for x in alone))  # each alone, never averaged

    merged = arena.load([a, b])
    assert isinstance(merged, arena.MergedResults) and len(merged.rows) == 4
    frame = merged.frame()
    assert list(frame.columns[:2]) == ["key", "run"] and sorted(frame["run"]) == ["run-a", "run-a", "run-b", "run-b"]
    assert merged.counts["ok"] == 4 and merged.exit_status == 0
    assert main(["leaderboard", str(a), str(b)]) == EXIT_OK
    assert "threshold-mia" in capsys.readouterr().out
    # a run directory copied (the same secret) adds nothing
    copy = a.parent / "copy-of-a"
    shutil.copytree(a, copy)
    assert len(arena.load([a, b, copy]).rows) == 4
