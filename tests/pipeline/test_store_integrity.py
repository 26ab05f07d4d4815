"""The cache and the results file defend themselves: damaged cache entries are retrained, bad result lines are
set aside with their numbers (a row of a newer schema among them; rows written before the schema are still read), a
run directory is locked while used, foreign or unwritable directories are refused with exit status 2 and left as
they were."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from arena.cli import main
from arena.pipeline.row import SCHEMA_VERSION, row_problem
from arena.pipeline.store import ORPHAN_SECONDS, REJECTED, RunStore, TensorCache
from tests.conftest import TEST_SECRET, write_scenario
from tests.pipeline.test_faults import SMALL

TWO_SEEDS = SMALL.replace("seeds: [0]", "seeds: [0, 1]")


def comparable(store: RunStore) -> dict[str, dict]:
    return {r["key"]: {k: v for k, v in r.items() if k != "seconds"} for r in store.results()}


@pytest.fixture(scope="module")
def finished_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One finished two-matchup run per module (scenario small.yaml beside run/), copied by ``finished``."""
    root = tmp_path_factory.mktemp("finished")
    path = write_scenario(root / "small.yaml", TWO_SEEDS)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ARENA_RUN_SECRET", TEST_SECRET)
        assert main(["run", str(path), "--out", str(root / "run"), "--serial", "--no-report"]) == 0
    return root


@pytest.fixture
def finished(finished_once: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A finished two-matchup run of this test's own: (scenario, run directory)."""
    shutil.copytree(finished_once / "run", tmp_path / "run", symlinks=True)
    return write_scenario(tmp_path / "small.yaml", TWO_SEEDS), tmp_path / "run"


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes): what must be the same after a refused command."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


@contextlib.contextmanager
def read_only(root: Path) -> Iterator[None]:
    """Make ``root`` read-only as a read-only mount would: a read-only bind mount of it onto itself where this
    process may mount (root), else every file 0444 and every folder 0555 (root ignores modes, so not as root)."""
    if os.geteuid() == 0:
        if not _mount("--bind", str(root), str(root)):
            pytest.skip("cannot bind-mount here")
        try:
            if not _mount("-o", "remount,bind,ro", str(root)):
                pytest.skip("cannot remount read-only here")
            yield
        finally:
            subprocess.run(["umount", str(root)], check=True)
        return
    paths = [root, *root.rglob("*")]
    modes = {p: p.stat().st_mode for p in paths}
    for p in sorted(paths, key=lambda p: -len(p.parts)):
        p.chmod(0o555 if p.is_dir() else 0o444)
    try:
        yield
    finally:
        for p in sorted(paths, key=lambda p: len(p.parts)):
            p.chmod(modes[p])


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


@pytest.mark.slow
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


def test_rows_carry_their_schema_and_rows_written_before_it_are_still_read(finished, capsys) -> None:
    """A run writes rows of the current schema; a row without one (version 0) is read and not replayed; a row of a
    newer schema is not read (an older arena cannot know its fields), is set aside, and its matchup played again."""
    path, out = finished
    store = RunStore(out)
    rows = store.results()
    assert len(rows) == 2 and all(r["schema"] == SCHEMA_VERSION and row_problem(r) is None for r in rows)
    lines = store.results_path.read_text().splitlines()
    old = {k: v for k, v in json.loads(lines[0]).items()
           if k not in ("schema", "release_key", "metric_info", "primary_metric", "rank_metric")}
    newer = {**json.loads(lines[1]), "schema": SCHEMA_VERSION + 1}
    store.results_path.write_text(json.dumps(old) + "\n" + json.dumps(newer) + "\n")
    capsys.readouterr()
    assert main(["leaderboard", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"line 2: a row of schema {SCHEMA_VERSION + 1}, newer than this arena reads" in err
    assert [r["key"] for r in RunStore(out).results()] == [old["key"]]
    assert main(["run", str(path), "--out", str(out), "--serial", "--no-report"]) == 0
    assert f"moved to {REJECTED}" in capsys.readouterr().err
    again = RunStore(out).results()
    assert [r["key"] for r in again] == [old["key"], newer["key"]], "the old row kept, the newer one played again"
    assert "schema" not in again[0] and again[1]["schema"] == SCHEMA_VERSION


def test_a_second_run_into_a_locked_directory_is_refused(finished, capsys) -> None:
    path, out = finished
    store = RunStore(out)
    before = store.results_path.read_bytes()
    with store.lock():
        assert main(["run", str(path), "--out", str(out), "--serial"]) == 2
    err = capsys.readouterr().err
    assert f"{out}: in use by another arena run (pid {os.getpid()})" in err
    assert store.results_path.read_bytes() == before


HOLD = """
import sys
import time
from arena.pipeline.store import RunStore

with RunStore(sys.argv[1]).lock():
    print("held", flush=True)
    sys.stdin.read()  # until the test closes the pipe or kills this process
"""


@pytest.mark.subprocess
def test_a_run_directory_held_by_another_process_is_refused_naming_it(tmp_path: Path, capsys) -> None:
    """Another process's ``arena run`` holds the directory: a second run is exit 2 naming that process's pid and
    writes nothing; once the holder is killed the operating system has released the lock (none is left stale)."""
    path = write_scenario(tmp_path / "small.yaml", SMALL)
    out = tmp_path / "run"
    RunStore(out).mark()
    before = snapshot(out)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(["run", str(path), "--out", str(out), "--serial"]) == 2
        err = capsys.readouterr().err
        assert f"{out}: in use by another arena run (pid {holder.pid}); wait for it to finish or choose another --out" \
            in err, err
        assert "Traceback" not in err
        assert {k: v for k, v in snapshot(out).items() if k != ".arena-lock"} == \
               {k: v for k, v in before.items() if k != ".arena-lock"}, "nothing written"
        assert not (out / "results.jsonl").exists()
    finally:
        holder.kill()
        holder.wait()
    with RunStore(out).lock():  # the killed holder's lock went with it
        pass


ORPHANED = """
import os, sys, time
from arena.pipeline.store import RunStore

with RunStore(sys.argv[1]).lock():
    if os.fork() == 0:  # the lock is shared with this child, which outlives its parent by a second
        time.sleep(1.0)
        os._exit(0)
    print("held", flush=True)
    os._exit(0)  # the holder named in the lock file is gone; its child still holds the lock
"""


@pytest.mark.subprocess
def test_a_lock_left_to_a_dying_child_of_a_dead_run_is_waited_for(tmp_path: Path) -> None:
    """After a ``kill -9`` the arena's forked processes die with it, a moment later: a run started at once waits
    for them (up to ``ORPHAN_SECONDS``) instead of refusing a directory whose named holder is gone."""
    out = tmp_path / "run"
    RunStore(out).mark()
    holder = subprocess.Popen([sys.executable, "-c", ORPHANED, str(out)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.wait()
    started = time.monotonic()
    with RunStore(out).lock():
        waited = time.monotonic() - started
    assert (out / ".arena-lock").read_text().strip() == str(os.getpid())
    assert waited < ORPHAN_SECONDS


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

    def full(self, row):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.results_path))

    monkeypatch.setattr(RunStore, "append_result", full)
    assert main(["run", str(path), "--out", str(out), "--serial"]) == 2
    err = capsys.readouterr().err
    assert f"{out / 'results.jsonl'}: cannot write the run directory: No space left on device" in err
    assert "Traceback" not in err


def test_a_read_only_run_directory_is_a_clear_error(finished, capsys) -> None:
    """On a read-only run directory ``arena run`` (with matchups still to play) and ``arena report`` are exit 2
    naming the file they could not write, nothing changes, and ``arena leaderboard`` still reads it."""
    path, out = finished
    more = write_scenario(path, TWO_SEEDS.replace("seeds: [0, 1]", "seeds: [0, 1, 2]"))
    before = snapshot(out)
    with read_only(out):
        assert main(["run", str(more), "--out", str(out), "--serial"]) == 2
        err = capsys.readouterr().err
        assert f"{out / '.arena-lock'}: cannot write the run directory: " in err, err
        assert "Read-only file system" in err or "Permission denied" in err
        assert main(["report", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"{out / 'report'}" in err and "cannot write the report" in err, err
        assert main(["leaderboard", str(out)]) == 0
        assert "threshold-mia" in capsys.readouterr().out
        assert "Traceback" not in err
    assert snapshot(out) == before, "nothing written, nothing lost"


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A folder on a 1 MiB file system that is full (root only: it mounts a tmpfs)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    if not _mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)):
        pytest.skip("cannot mount a tmpfs here")
    try:
        with contextlib.suppress(OSError), open(disk / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_a_really_full_disk_is_a_clear_error(full_disk: Path, tmp_path: Path, capsys) -> None:
    path = write_scenario(tmp_path / "small.yaml", SMALL)
    out = full_disk / "run"
    assert main(["run", str(path), "--out", str(out), "--serial"]) == 2
    err = capsys.readouterr().err
    assert f"{out}" in err and "cannot write the run directory: No space left on device" in err, err
    assert "Traceback" not in err
    assert not (out / "results.jsonl").exists()


@pytest.mark.slow
def test_a_row_holding_an_unbounded_number_is_set_aside_with_its_line_never_a_crash(finished, capsys) -> None:
    """A row that carries ``10**4000`` (as an attack's ``references`` once did, issue 40, D) overflows any reader
    that makes a float of it: the board and the report set it aside with its line number, the run moves it."""
    path, out = finished
    store = RunStore(out)
    good = store.results_path.read_text().splitlines()
    huge = json.loads(good[0])
    huge["metrics"]["reference_points"] = 10**4000
    other = json.loads(good[1])
    other["epsilon"] = 10**4000
    store.results_path.write_text("\n".join([good[0], json.dumps(huge), json.dumps(other), good[1]]) + "\n")
    capsys.readouterr()
    assert main(["leaderboard", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"{store.results_path}: line 2: 'metrics.reference_points' is not a number" in err, err
    assert f"{store.results_path}: line 3: 'epsilon' is not a finite number" in err, err
    assert "Traceback" not in err and "OverflowError" not in err
    assert main(["report", str(out)]) == 0 and (out / "report" / "index.html").exists()
    assert main(["run", str(path), "--out", str(out), "--serial", "--no-report"]) == 0
    assert store.results_path.read_text().splitlines() == good
    assert [r["line"] for r in map(json.loads, (out / REJECTED).read_text().splitlines())] == [2, 3]
