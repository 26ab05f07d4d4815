"""The cache and the results file defend themselves: damaged cache entries are retrained, bad result lines are
set aside with their numbers, a run directory is locked while used, foreign or unwritable directories are refused
with exit status 2 and left as they were."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import torch

from arena.cli import main
from arena.store import REJECTED, RunStore, TensorCache
from tests.test_faults import SMALL
from tests.conftest import write_scenario

TWO_SEEDS = SMALL.replace("seeds: [0]", "seeds: [0, 1]")


def comparable(store: RunStore) -> dict[str, dict]:
    return {r["key"]: {k: v for k, v in r.items() if k != "seconds"} for r in store.results()}


@pytest.fixture
def finished(tmp_path: Path) -> tuple[Path, Path]:
    """A finished two-matchup run: (scenario, run directory)."""
    path = write_scenario(tmp_path / "small.yaml", TWO_SEEDS)
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--serial", "--no-report"]) == 0
    return path, out


def test_cache_entries_carry_a_digest_checked_on_read(tmp_path: Path, capsys) -> None:
    cache = TensorCache(tmp_path)
    cache.put("models", "k", {"w": torch.arange(6.0).reshape(2, 3)})
    assert torch.equal(cache.get("models", "k")["w"], torch.arange(6.0).reshape(2, 3))
    path = cache.path("models", "k")
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x40  # one bit of the last float
    path.write_bytes(bytes(data))
    assert cache.get("models", "k") is None
    assert f"warning: {path}: cache entry fails its sha256 check" in capsys.readouterr().err


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_damaged_cached_model_is_retrained(finished, capfd, damage: str) -> None:
    path, out = finished
    store = RunStore(out)
    before = comparable(store)
    models = sorted((out / "cache" / "models").glob("*.safetensors"))
    assert models
    for model in models:
        data = model.read_bytes()
        model.write_bytes(data[: len(data) // 2] if damage == "truncate" else data[:-1] + bytes([data[-1] ^ 0x40]))
    store.results_path.unlink()  # play every matchup again, from the (damaged) cache
    capfd.readouterr()
    assert main(["run", str(path), "--out", str(out), "--serial", "--no-report"]) == 0
    err = capfd.readouterr().err  # the matchups' child processes warn
    assert all(str(m) in err for m in models), err
    assert comparable(RunStore(out)) == before, "retrained models give the rows of the undamaged run"
    assert all(RunStore(out).cache.get("models", m.stem) is not None for m in models), "the entries were repaired"


def test_bad_lines_anywhere_are_reported_and_set_aside(finished, capsys) -> None:
    path, out = finished
    store = RunStore(out)
    good = store.results_path.read_text().splitlines()
    bad = ["garbage that is not json", '{"hello": "world"}', "[1, 2, 3]", '{"key": "x", "status": "maybe"}']
    store.results_path.write_text("\n".join([good[0], *bad, good[1]]) + "\n")

    capsys.readouterr()
    assert main(["leaderboard", str(out)]) == 0
    err = capsys.readouterr().err
    for line in (2, 3, 4, 5):
        assert f"{store.results_path}: line {line}:" in err
    assert "Traceback" not in err
    assert main(["report", str(out)]) == 0
    assert (out / "report" / "index.html").exists()

    assert main(["run", str(path), "--out", str(out), "--serial", "--no-report"]) == 0
    err = capsys.readouterr().err
    assert "line 2: not JSON" in err and f"moved to {REJECTED}" in err
    assert store.results_path.read_text().splitlines() == good, "good rows kept, bad ones gone, nothing replayed"
    rejected = [json.loads(x) for x in (out / REJECTED).read_text().splitlines()]
    assert [r["line"] for r in rejected] == [2, 3, 4, 5]
    assert [r["text"] for r in rejected] == bad


def test_a_second_run_into_a_locked_directory_is_refused(finished, capsys) -> None:
    path, out = finished
    store = RunStore(out)
    before = store.results_path.read_bytes()
    with store.lock():
        assert main(["run", str(path), "--out", str(out), "--serial"]) == 2
    err = capsys.readouterr().err
    assert f"{out}: in use by another arena run (pid {os.getpid()})" in err
    assert store.results_path.read_bytes() == before


def test_a_foreign_results_file_is_refused_and_left_untouched(tmp_path: Path, capsys) -> None:
    path = write_scenario(tmp_path / "small.yaml", SMALL)
    out = tmp_path / "someone-elses"
    out.mkdir()
    (out / "results.jsonl").write_text('{"name": "alice", "score": 3}\n')
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert main(["run", str(path), "--out", str(out), "--serial"]) == 2
    err = capsys.readouterr().err
    assert f"{out / 'results.jsonl'}: not an arena results file (line 1:" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_an_unwritable_run_directory_is_a_clear_error(tmp_path: Path, capsys) -> None:
    path = write_scenario(tmp_path / "small.yaml", SMALL)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    assert main(["run", str(path), "--out", str(blocker / "run"), "--serial"]) == 2
    err = capsys.readouterr().err
    assert "cannot write the run directory" in err and "Traceback" not in err
    assert blocker.read_text() == "not a directory"


def test_a_full_disk_is_a_clear_error(tmp_path: Path, capsys, monkeypatch) -> None:
    path = write_scenario(tmp_path / "small.yaml", SMALL)
    out = tmp_path / "run"

    def full(self, row):  # noqa: ANN001
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.results_path))

    monkeypatch.setattr(RunStore, "append_result", full)
    assert main(["run", str(path), "--out", str(out), "--serial"]) == 2
    err = capsys.readouterr().err
    assert f"{out / 'results.jsonl'}: cannot write the run directory: No space left on device" in err
    assert "Traceback" not in err


def test_a_read_only_run_directory_is_a_clear_error(finished, capsys) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes to read-only directories")
    path, out = finished
    os.chmod(out, 0o555)
    try:
        assert main(["report", str(out)]) == 2
        assert "cannot write the report" in capsys.readouterr().err
    finally:
        os.chmod(out, 0o755)
