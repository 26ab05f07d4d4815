"""A 10,000-row run directory reads with bounded memory: its rows parsed and checked once, every track's board
built from the bootstrap draws each matchup saved (read lazily, summarised per cell), the leaderboard's text and
long records rendered, all in a child process whose peak resident memory stays under 1 GB: its own address
space's high-water mark (``VmHWM``; ``ru_maxrss`` keeps the forking parent's peak across ``exec`` on Linux, which
in a long test run is the test worker's). The run
directory is the benchmarks' synthetic one (``benchmarks.rundir``): the membership game's rows of the current
schema over 4 tracks, 29 × 29 cells a track, 3 seeds, each ok matchup with its arrays and draws."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from arena.pipeline.store import SECRET_ENV, RunStore
from benchmarks.rundir import SECRET, make_run_dir

ROWS = 10_000
PEAK_BYTES = 1 << 30  # 1 GiB

READ = """
import json, resource, sys


def peak_kib():
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

from arena import api
from arena.results.leaderboard import long_rows, render_table

results = api.load(sys.argv[1])
boards = results.boards()
text = render_table(boards)
records = long_rows(boards)
print(json.dumps({
    "rows": len(results.rows),
    "tracks": len(boards),
    "cells": sum(b.means.size for b in boards),
    "methods": sorted({iv.method for b in boards for iv in b.intervals.values()}),
    "text": len(text),
    "records": len(records),
    "peak_kib": peak_kib(),
    "heavy": sorted(m for m in ("torch", "transformers", "ray", "arena.plugins") if m in sys.modules),
}))
"""


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_10000_row_run_directory_reads_in_under_1_gb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, SECRET)  # the generated run's secret, which the child reads its entries with
    run = make_run_dir(tmp_path / "run", ROWS)
    # a user's environment: the test run's own variables (plugin distributions other tests installed, trust
    # settings) are not the reader's
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")} | {SECRET_ENV: SECRET}
    done = subprocess.run([sys.executable, "-c", READ, str(run)], capture_output=True, text=True, timeout=900, env=env,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    # every (track, defense, attack) with an ok row is a cell of its track's grid (a grid spans its rows' defenses
    # and attacks, so a cell whose every seed failed is there too, without a mean)
    rows = RunStore(run).results()
    cells = {(r["track"], r["defense_label"], r["attack_label"]) for r in rows if r["status"] == "ok"}
    assert found["rows"] == ROWS and found["tracks"] == 4
    assert 0.95 * 4 * 29 * 29 <= len(cells) <= found["cells"] <= 4 * 29 * 29
    assert found["records"] == found["cells"]
    assert "bootstrap" in found["methods"]  # the saved draws were read: 3 seeds, below a t-interval's 5
    assert found["peak_kib"] * 1024 <= PEAK_BYTES, f"peak {found['peak_kib'] / 1024:.0f} MiB with {found['heavy']}"


def test_the_generated_rows_are_rows_of_the_current_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the memory test and the benchmarks read is what ``arena run`` writes: every line passes the store's
    checks, the keys are unique, and the draws and arrays each ok matchup saved verify against the run's secret."""
    from arena.pipeline.store import RunStore, read_results

    monkeypatch.setenv(SECRET_ENV, SECRET)
    run = make_run_dir(tmp_path / "run", 120, tracks=2, seeds=3)
    read = read_results(run / "results.jsonl")
    assert len(read.rows) == 120 and not read.rejected
    assert len({r["key"] for r in read.rows}) == 120
    store = RunStore(run)
    ok = [r for r in read.rows if r["status"] == "ok"]
    assert 0 < len(ok) < 120  # failures and skips sprinkled in
    for row in ok[:5]:
        assert set(store.read_arrays(row["key"]) or {}) == {"scores", "is_member", "record", "label"}
        draws = store.load_draws(row["key"]) or {}
        assert "auc" in draws and draws["auc"].shape == (1000,)
    assert set(store.matchups() or {}) == {r["key"] for r in read.rows}
