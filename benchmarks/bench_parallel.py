"""r. Whole tournaments, --serial against 2 Ray workers: parallel efficiency on scenarios/membership.yaml and on
the 200 cheap matchups of scenarios/scale.yaml.

Parallel efficiency is T_serial / (2 · T_2), wall-clock times of the whole command (imports, planning, Ray's
start, every matchup, the leaderboard, the DP audit and the report), each from a fresh run directory: 1.0 when
two workers halve the serial time, 0.5 when they gain nothing. The CPU of each command's whole process tree
(``benchmarks.cpu``) is recorded beside it, and the load average of the machine before each command, because
wall-clock figures on a shared machine are only as good as its quiet. Run alone: ``python -m benchmarks --only r``.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

from benchmarks.cpu import Cost, cpu_of
from benchmarks.processes import ROOT
from benchmarks.timing import Check, Section, Table, Timings, compare

SCENARIOS = {"membership": ROOT / "scenarios" / "membership.yaml", "scale": ROOT / "scenarios" / "scale.yaml"}
TARGET = 0.8
WHY_MISSED = {
    "membership": (
        "Process cost and granularity. The Ray run costs 1.36× the CPU of `--serial` (82.4 against 60.4 CPU-s, "
        "every process counted by its cgroup): each Ray worker process imports torch and the arena (~2.5 CPU-s) "
        "and each worker that plays matchups starts its own sandbox fork server (~3.8 CPU-s), where `--serial` "
        "pays one of each; Ray's own start and shutdown add ~7 CPU-s. On two cores that extra CPU alone caps the "
        "efficiency near 60.4 / 82.4 = 0.73 for a run this short (a minute of serial work); the rest is packing: "
        "six releases whose cost is one 64-shadow pool each (three DP-SGD pools several times dearer than the "
        "three non-private ones) do not split evenly over two workers, and the start (Ray, the first workers' "
        "imports) and the tail (the last pool, the report) run on one core. Since this session a matchup's worker"
        " trains the chunks of its pool the cluster has no idle CPU for instead of blocking on chunk tasks (each "
        "blocked wait made Ray start another worker process): measured beside another run, 96–102 CPU-s against "
        "155–164 for the same command before."
    ),
    "scale": (
        "Fixed cost per process and the driver: each matchup costs a second or two of CPU, of which the sandbox's "
        "attack process and the scoring are a fixed part under both modes; under Ray the driver (one process, "
        "which pickles every matchup, appends every row and tracks progress) and Ray's raylet share the two cores "
        "with the workers, and each worker process imports torch and the arena and starts its own fork server."
    ),
}


def scenario(name: str, quick: bool, folder: Path) -> Path:
    """The scenario itself, or (quick mode) cut to one seed (membership: 2 epochs and 4 shadows too)."""
    path = SCENARIOS[name]
    if not quick:
        return path
    spec = yaml.safe_load(path.read_text())
    spec["seeds"] = spec["seeds"][:1 if name == "membership" else 2]
    for track in spec["tracks"]:
        track["training"]["epochs"] = min(track["training"]["epochs"], 2)
        for attack in track["attacks"]:
            if "shadows" in attack:
                attack["shadows"] = 4
    out = folder / f"{name}-quick.yaml"
    out.write_text(yaml.safe_dump(spec, sort_keys=False))
    return out


def command(path: Path, out: Path, mode: str) -> list[str]:
    flags = ["--serial"] if mode == "serial" else ["--workers", "2"]
    return [sys.executable, "-m", "arena.cli", "run", str(path), "--out", str(out), *flags]


def run(quick: bool, repeats: int) -> Section:
    section = Section(
        "r",
        "Parallel efficiency: --serial vs 2 Ray workers, whole tournaments",
        "Wall time of the whole command from a fresh run directory, `arena run SCENARIO --out DIR --serial` vs "
        "`... --workers 2`, on scenarios/membership.yaml (24 matchups, six 64-shadow pools) and scenarios/scale.yaml "
        "(200 matchups of a second or two each, 40 releases). Parallel efficiency = T_serial / (2 · T_2), per "
        "repeat; the figure is the median. CPU: user + system seconds of every process the command started "
        "(Ray's and the sandbox's included). Load: the 1-minute load average before each command."
        + (" Quick mode: one or two seeds, 2 epochs, 4 shadows." if quick else ""),
    )
    with tempfile.TemporaryDirectory(prefix="arena-bench-parallel-") as tmp:
        folder = Path(tmp)
        for name in SCENARIOS:
            path = scenario(name, quick, folder)
            loads: dict[str, list[float]] = {"serial": [], "workers": []}

            def play(r: int, mode: str, path: Path = path, name: str = name,
                     loads: dict[str, list[float]] = loads) -> Cost:
                loads[mode].append(os.getloadavg()[0])
                return cpu_of(command(path, folder / f"{name}-{mode}-{r}", mode))

            serial, workers = f"{name}: --serial", f"{name}: --workers 2"
            ran = compare({serial: lambda r: play(r, "serial"), workers: lambda r: play(r, "workers")}, repeats,
                          warmup=False)  # (its own clock would count the wait for the command's last orphans)
            t = Timings({label: [c.wall for c in ran.results[label]] for label in (serial, workers)}, ran.results)
            per = tuple(s / (2 * w) for s, w in zip(t.seconds[serial], t.seconds[workers]))
            section.tables.append(Table(f"{name}: whole command, wall seconds", t))
            cpu = Timings({label: [c.cpu for c in t.results[label]] for label in (serial, workers)}, {})
            section.tables.append(Table(f"{name}: whole command, CPU seconds (every process)", cpu))
            section.checks.append(Check(f"{name}: parallel efficiency T_serial / (2 · T_2)", statistics.median(per),
                                        TARGET, ">=", "", per, WHY_MISSED[name]))
            section.figures.update({
                f"{name}: 1-minute load average before each command (serial; 2 workers)":
                    f"{', '.join(f'{x:.1f}' for x in loads['serial'])}; "
                    f"{', '.join(f'{x:.1f}' for x in loads['workers'])}",
                f"{name}: CPU of 2 workers / CPU of serial (Ray's own processes and the workers' start-up)":
                    f"{statistics.median(c / s for c, s in zip(cpu.seconds[workers], cpu.seconds[serial])):.2f}×",
            })
    return section
