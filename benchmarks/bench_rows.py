"""p. Post-processing at scale: `arena leaderboard` and `arena report` on generated run directories of 1,000 and
10,000 rows side by side, with their growth exponent, and row appends at 0 and at 10,000 rows."""

from __future__ import annotations

import math
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.processes import run_command
from benchmarks.rundir import SECRET, Shape, make_run_dir
from benchmarks.timing import Check, Section, Table, Timings, compare

SIZES = (1_000, 10_000)
QUICK_SIZES = (100, 1_000)
LEADERBOARD_TARGET, REPORT_TARGET = 10.0, 60.0  # seconds of CPU at the larger size
EXPONENT_TARGET = 1.0  # linear in the rows at most
APPENDS = 1_000
FLAT_TARGET = 1.25  # time per 1,000 appends at 10,000 rows / at 0 rows
BEFORE = (
    "Before (issue 41, an independent measurement on this machine, quiet): `arena leaderboard` 1.7 s at 100 rows, "
    "8.9 s at 1,000 and 110 s at 10,000; `arena report` 17 CPU-s at 100 rows and 292 CPU-s at 1,000 (×17 for ×10 "
    "rows); appending a row re-read the whole results file: 0.71 s per 1,000 appends at the start, 4.83 s per 1,000 "
    "at 5,000 rows."
)
MISSED = {
    "leaderboard": "What is left grows with the rows: each ok matchup's draws file is read and verified (SHA-256 over "
                   "its 8 × 1,000 draws and the HMAC with the run's secret, ~0.4 ms), each row parsed and its fields "
                   "checked once (~0.15 ms), and each cell's statistics computed per metric.",
    "report": "The figures are bounded (at most 6 attack panels of 8 curves, compact heatmaps) but the page's tables "
              "read every cell and every audited matchup, and the per-track arrays are read for the audited ROC "
              "table's every audited pair.",
    "exponent": "Start-up (the interpreter, numpy, pandas, matplotlib: ~2 s of CPU) is paid once at both sizes, so a "
                "linear command shows an exponent below 1; one above 1 means some step grows faster than the rows.",
    "appends": "Each append is one open, a one-byte read of the file's end, one write and one fsync; the fsync's "
               "latency is the disk's and varies with what else writes on the machine.",
}


def arena_command(*args: str) -> list[str]:
    """``python -m arena.cli ARGS`` with this interpreter: the arena of this checkout, whatever its console
    script's shebang names."""
    return [sys.executable, "-m", "arena.cli", *args]


def _cpu_of(command: list[str]) -> tuple[float, float]:
    """Run ``command``; (CPU seconds of it and its children, wall seconds)."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    run_command(command)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, time.perf_counter() - start


def _row(n: int) -> dict:
    """A small result row (what the append path writes: one JSON line)."""
    return {"schema": 0, "key": f"k{n:08d}", "status": "ok", "track": "t", "seed": n % 5, "metrics": {"auc": 0.5}}


def _appends(folder: Path, prefill: int, repeats: int) -> list[float]:
    """Seconds per ``APPENDS`` appends to a results file already holding ``prefill`` rows, once per repeat (the
    file cut back to its ``prefill`` rows before each)."""
    from arena.pipeline.store import RunStore

    folder.mkdir(parents=True, exist_ok=True)
    store = RunStore(folder)
    store.results_path.touch()
    for n in range(prefill):
        store.append_result(_row(n))
    size = store.results_path.stat().st_size if store.results_path.exists() else 0
    out = []
    for _ in range(repeats):
        with open(store.results_path, "ab") as f:
            f.truncate(size)
        start = time.perf_counter()
        for n in range(APPENDS):
            store.append_result(_row(prefill + n))
        out.append(time.perf_counter() - start)
    return out


def _exponent(small: float, large: float, sizes: tuple[int, int]) -> float:
    return math.log(large / small) / math.log(sizes[1] / sizes[0])


def run(quick: bool, repeats: int) -> Section:
    sizes = QUICK_SIZES if quick else SIZES
    shapes = {n: Shape.of(n) for n in sizes}
    section = Section(
        "p",
        f"Post-processing {sizes[0]:,} and {sizes[1]:,} rows; row appends at 0 and {sizes[1]:,} rows",
        "Synthetic run directories (`benchmarks/rundir.py`): membership rows of the current schema over 4 tracks, "
        + ", ".join(f"{n:,} rows: {s.defenses} × {s.attacks} cells a track" for n, s in shapes.items())
        + ", 3 seeds (below 5: every interval a bootstrap from the saved draws), DP-SGD and output perturbation "
        "claiming ε, RelaxLoss, 4 attack families with variants, 1 % failed or skipped; each ok matchup with its "
        "arrays (400 challenge points) and bootstrap draws (1,000 per metric) authenticated with the run's secret. "
        "Each size's `arena leaderboard` and `arena report` run as fresh processes, the sizes side by side in "
        "rotated order, after one untimed `arena leaderboard` (the DP audit, kept in the run directory). Checked "
        "in the CPU seconds of the command (what its wall time is on an otherwise idle core); the growth exponent "
        "is log(t_large / t_small) / log(10) per repeat, its median. Appends: `RunStore.append_result` of "
        f"{APPENDS:,} rows (each flushed and fsynced) to an empty results file and to one of {sizes[1]:,} rows, "
        "wall-clock seconds, side by side per repeat.",
    )
    env = os.environ.get("ARENA_RUN_SECRET")
    os.environ["ARENA_RUN_SECRET"] = SECRET  # the generated runs' secret, which the commands read entries with
    try:
        with tempfile.TemporaryDirectory(prefix="arena-bench-rows-") as tmp:
            folder = Path(tmp)
            made = {}
            for n in sizes:
                begin = time.perf_counter()
                made[n] = make_run_dir(folder / f"run-{n}", n)
                section.figures[f"generating {n:,} rows"] = f"{time.perf_counter() - begin:.0f} s wall"
                first = _cpu_of(arena_command("leaderboard", str(made[n])))
                section.figures[f"first `arena leaderboard`, {n:,} rows (runs the DP audit)"] = (
                    f"{first[0]:.1f} s CPU, {first[1]:.1f} s wall")
            cpu: dict[str, list[float]] = {}
            wall: dict[str, list[float]] = {}

            def command(name: str, n: int):
                label = f"arena {name}, {n:,} rows"
                cpu[label], wall[label] = [], []

                def call(_r: int) -> None:
                    c, w = _cpu_of(arena_command(name, str(made[n])))
                    cpu[label].append(c)
                    wall[label].append(w)
                return label, call

            contenders = dict(command(name, n) for name in ("leaderboard", "report") for n in sizes)
            compare(contenders, repeats, warmup=False)
            appended = {f"{APPENDS:,} appends at 0 rows": [], f"{APPENDS:,} appends at {sizes[1]:,} rows": []}
            at_zero, at_full = _appends(folder / "append-0", 0, repeats), _appends(folder / "append-n", sizes[1],
                                                                                    repeats)
            appended[f"{APPENDS:,} appends at 0 rows"] = at_zero
            appended[f"{APPENDS:,} appends at {sizes[1]:,} rows"] = at_full
    finally:
        if env is None:
            os.environ.pop("ARENA_RUN_SECRET", None)
        else:
            os.environ["ARENA_RUN_SECRET"] = env
    cpu_t, wall_t, append_t = Timings(cpu, {}), Timings(wall, {}), Timings(appended, {})
    section.tables += [Table("whole commands, CPU seconds of the command's process (user + system)", cpu_t),
                       Table("whole commands, wall-clock seconds (inflated by whatever else the machine runs)", wall_t),
                       Table(f"{APPENDS:,} row appends, wall-clock seconds", append_t)]
    small, large = sizes
    for name, target in (("leaderboard", LEADERBOARD_TARGET), ("report", REPORT_TARGET)):
        lo, hi = cpu[f"arena {name}, {small:,} rows"], cpu[f"arena {name}, {large:,} rows"]
        section.checks.append(Check(f"`arena {name}`, {large:,} rows, CPU", statistics.median(hi), target, "<=",
                                    " s", tuple(hi), MISSED[name]))
        per = tuple(_exponent(a, b, sizes) for a, b in zip(lo, hi))
        section.checks.append(Check(f"`arena {name}`: growth exponent {small:,} → {large:,} rows",
                                    statistics.median(per), EXPONENT_TARGET, "<=", "", per, MISSED["exponent"]))
    flat = tuple(b / a for a, b in zip(at_zero, at_full))
    section.checks.append(Check(f"appends: time per {APPENDS:,} at {large:,} rows / at 0 rows",
                                statistics.median(flat), FLAT_TARGET, "<=", "×", flat, MISSED["appends"]))
    section.figures["before"] = BEFORE
    return section
