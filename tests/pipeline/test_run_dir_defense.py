"""A damaged run directory never crashes a reader: ill-typed row values are set aside with their line number,
swapped cache entries are misses (HMAC with the run secret), FIFOs and symlinks in the run directory are refused."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from arena.cli import main
from arena.pipeline.store import LOCK, REJECTED, RunDirError, RunStore, read_results
from tests.pipeline.test_store_integrity import comparable, finished, finished_once  # noqa: F401

BAD = {"none": None, "list": [1], "dict": {"a": 1}, "huge": "x" * 2_000_000, "nan": float("nan"), "neg": -5}
PATHS = [("epsilon",), ("seed",), ("seconds",), ("metrics", "n_nonmembers"), ("metric_info", "auc", "bounds"),
         ("metric_info", "auc", "bounds", 0), ("versions", "arena"), ("notes",), ("track",), ("error",)]


def _set(obj: dict, path: tuple, value: object) -> None:
    for part in path[:-1]:
        obj = obj[part]
    obj[path[-1]] = value


@pytest.mark.slow
def test_ill_typed_values_are_set_aside_never_a_traceback(finished: tuple[Path, Path],  # noqa: F811 - pytest fixture
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Each bad value in each field on a line of its own, beside a good row: the readers go on, and exactly the
    ill-typed lines are named and set aside (a null or negative value is valid in some fields: a null bound is an
    infinite end). One file holds every case, so the commands read them all in one call each."""
    _, run = finished
    lines = (run / "results.jsonl").read_text().splitlines()
    rows, cases = [], {}
    for path in PATHS:
        for name, value in BAD.items():
            row = json.loads(lines[0])
            _set(row, path, value)
            rows.append(json.dumps(row))
            cases[len(rows)] = (path, name)
    (run / "results.jsonl").write_text("\n".join(rows + [lines[1]]) + "\n")
    set_aside = {line for line, _, _ in read_results(run / "results.jsonl").rejected}
    for number, (path, name) in cases.items():
        assert number in set_aside or name in ("none", "neg"), (path, name)
    assert {path for number, (path, _) in cases.items() if number in set_aside} == set(PATHS), "every field checked"
    assert len(rows) + 1 not in set_aside, "the good row is kept"
    for command in (["leaderboard", str(run)], ["report", str(run)]):
        assert main(command) in (0, 2), command
        err = capsys.readouterr().err
        assert "Traceback" not in err
        assert {number for number in range(1, len(rows) + 2) if f"line {number}:" in err} == set_aside, err[-2000:]


def test_swapped_cache_entries_are_misses(finished: tuple[Path, Path]) -> None:  # noqa: F811 - pytest fixture
    scenario, run = finished
    before = comparable(RunStore(run))
    entries = sorted((run / "cache").rglob("*.safetensors"))
    assert len(entries) >= 2
    a, b = entries[0], entries[1]
    tmp = a.with_suffix(".swap")
    os.replace(a, tmp)
    os.replace(b, a)
    os.replace(tmp, b)
    for entry in entries[:2]:
        kind, key = entry.parent.name, entry.stem
        assert RunStore(run).cache.get(kind, key) is None
    (run / "results.jsonl").unlink()
    assert main(["run", str(scenario), "--out", str(run), "--serial", "--no-report"]) == 0
    assert comparable(RunStore(run)) == before


def test_fifo_in_cache_and_artifacts_is_refused_not_a_hang(finished: tuple[Path, Path]) -> None:  # noqa: F811 - pytest fixture
    _, run = finished
    store = RunStore(run)
    kind = next(p.parent.name for p in (run / "cache").rglob("*.safetensors"))
    os.mkfifo(store.cache.path(kind, "fifo"))
    assert store.cache.get(kind, "fifo") is None
    key = store.latest_rows()[0]["key"]
    arrays = store.artifacts.path(key, "arrays")
    arrays.unlink()
    os.mkfifo(arrays)
    assert store.load_arrays(key) is None
    assert main(["leaderboard", str(run)]) in (0, 2)


@pytest.mark.parametrize("name", [LOCK, REJECTED])
def test_symlinked_lock_and_rejected_are_refused(finished: tuple[Path, Path], tmp_path: Path, name: str) -> None:  # noqa: F811 - pytest fixture
    _, run = finished
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    (run / name).unlink(missing_ok=True)
    (run / name).symlink_to(target)
    store = RunStore(run)
    if name == LOCK:
        with pytest.raises(OSError), store.lock():
            pass
    else:
        with (run / "results.jsonl").open("a") as f:
            f.write("not json\n")
        with pytest.raises(OSError):
            store.set_aside()
    assert target.read_text() == "keep me\n"


def test_a_fifo_results_file_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / "results.jsonl")
    with pytest.raises(RunDirError):
        RunStore(run).results()
    shutil.rmtree(run)
