"""e. The quickstart tournament on Ray with 2 workers vs --serial, and a re-run of a finished run directory."""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.processes import ROOT, arena_command, run_command
from benchmarks.timing import Section, Table, Timings, compare, ratio

SCENARIO = ROOT / "scenarios" / "quickstart.yaml"
WORKERS_TARGET, RERUN_TARGET = 1.6, 20.0
RAY_START = (
    "import ray; ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, "
    "object_store_memory=128 * 1024 * 1024); ray.shutdown()"
)


def scenario(quick: bool, folder: Path) -> Path:
    """The quickstart itself, or (quick mode) the same tournament cut to one seed, 2 epochs and 4 shadows."""
    if not quick:
        return SCENARIO
    spec = yaml.safe_load(SCENARIO.read_text())
    spec["seeds"] = spec["seeds"][:1]
    for track in spec["tracks"]:
        track["training"]["epochs"] = 2
        for attack in track["attacks"]:
            if "shadows" in attack:
                attack["shadows"] = 4
    path = folder / "quickstart-quick.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def run(quick: bool, repeats: int) -> Section:
    section = Section(
        "e",
        "Tournament: 2 Ray workers vs --serial; re-run of a finished run",
        "Wall time of the whole command, from a fresh run directory each time, "
        f"`arena run {SCENARIO.relative_to(ROOT)} --out DIR --workers 2` vs `... --serial` (in-process, one "
        "matchup after another); then the same `--workers 2` command again on the run directory it just "
        "finished (every matchup already in results.jsonl: nothing is trained; the leaderboard, the DP audit "
        "and the report are written again). Each command is a fresh process, so import and Ray start-up "
        "costs are included, as a user pays them."
        + (" Quick mode: one seed, 2 epochs, 4 shadow models." if quick else ""),
    )
    with tempfile.TemporaryDirectory(prefix="arena-bench-") as tmp:
        folder = Path(tmp)
        path = str(scenario(quick, folder))
        finished: dict[int, Path] = {}

        def fresh(r: int, mode: str) -> Path:
            out = folder / f"{mode}-{r}"
            run_command(arena_command("run", path, "--out", str(out), *(["--serial"] if mode == "serial" else
                                                                       ["--workers", "2"])))
            return out

        serial, workers, rerun = "--serial", "--workers 2", "--workers 2, re-run of its finished run"

        def on_workers(r: int) -> None:
            finished[r] = fresh(r, "workers")

        t = compare({workers: on_workers, serial: lambda r: fresh(r, "serial")}, repeats, warmup=False)
        again = compare({rerun: lambda r: run_command(arena_command("run", path, "--out", str(finished[r]),
                                                                      "--workers", "2"))},
                        repeats, warmup=False)
        start_cost = []
        for _ in range(repeats):
            begin = time.perf_counter()
            run_command([sys.executable, "-c", RAY_START])
            start_cost.append(time.perf_counter() - begin)
    both = Timings({workers: t.seconds[workers], rerun: again.seconds[rerun]}, {})
    section.tables += [Table("whole command, seconds", t), Table("re-run, seconds", again)]
    section.checks += [
        ratio("serial / 2 workers", t, serial, workers, WORKERS_TARGET),
        ratio("first run / re-run (both --workers 2)", both, workers, rerun, RERUN_TARGET),
    ]
    ray = statistics.median(start_cost)
    overhead = again.median(rerun)
    work = t.median(serial) - overhead
    section.figures.update({
        "Ray start + shutdown alone (python -c 'ray.init(num_cpus=2); ray.shutdown()')": f"{ray:.1f} s",
        "fixed cost of any `arena run` (the re-run: imports, plan, leaderboard, audit, report)": f"{overhead:.1f} s",
        "serial time spent on matchups (serial − re-run)": f"{work:.1f} s",
        "best possible with 2 workers (fixed cost + Ray start + matchups / 2)":
            f"{overhead + ray + work / 2:.1f} s, i.e. at most {t.median(serial) / (overhead + ray + work / 2):.2f}× "
            "faster than serial",
    })
    return section
