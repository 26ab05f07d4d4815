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
IMPORTS = "import torch, sklearn.linear_model, scipy.stats, matplotlib.pyplot"
WORKERS_MISSED = (
    "Amdahl, on 2 cores. (1) Costs paid once and not in parallel: the fixed cost of any run (the re-run's "
    "time: imports, planning, leaderboard, DP audit) and Ray's start; together they cap the speed-up "
    "at the bound above. (2) Each Ray worker is a fresh process that imports torch and scikit-learn again "
    "(the import figure) before its first matchup, and the driver and raylet share the same 2 cores. (3) The "
    "shadow-model attack and LiRA share one cached shadow pool per release, trained once under a "
    "cross-process lock, so when both run at once the second waits for the first. (4) `--serial` may use the "
    "second core too (torch's 2 intra-op threads, while Ray pins each worker to one thread); the one-thread "
    "serial figure measures that effect. What would close it: run small plans without Ray (one process per "
    "core, started while the plan is built), schedule the matchups sharing a shadow pool on the same worker, "
    "and cut the fixed cost (see the re-run); on more cores, with more releases than cores, the ratio grows."
)
RERUN_MISSED = (
    "A re-run trains nothing and keeps an up-to-date report, but still pays the fixed cost above, nearly all "
    "of it imports (the import figure: torch, scikit-learn, scipy and matplotlib), then planning, the "
    "leaderboard and the DP audit. What would close it (outside the engine): import scikit-learn, scipy.stats "
    "and matplotlib only where a matchup or the report needs them (arena/metrics.py pulls scikit-learn in at "
    "start-up: ~1.5 s in a cProfile of one re-run here), leaving torch (~1.4 s) and planning: a re-run of "
    "~2 s and a ratio past 20×."
)
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
        for defense in track["defenses"]:  # a defense's own recipe (DP-SGD's) is cut too
            if "epochs" in defense.get("training", {}):
                defense["training"]["epochs"] = 2
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
        "finished (every matchup already in results.jsonl: nothing is trained; the leaderboard and the DP audit "
        "are computed again, the report kept when up to date). Each command is a fresh process, "
        "so import and Ray start-up "
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
        one_thread = time.perf_counter()
        run_command(arena_command("run", path, "--out", str(folder / "serial-1-thread"), "--serial"),
                    env={"OMP_NUM_THREADS": "1"})
        one_thread = time.perf_counter() - one_thread
        start_cost, import_cost = [], []
        for _ in range(repeats):
            for command, costs in ((RAY_START, start_cost), (IMPORTS, import_cost)):
                begin = time.perf_counter()
                run_command([sys.executable, "-c", command])
                costs.append(time.perf_counter() - begin)
    both = Timings({workers: t.seconds[workers], rerun: again.seconds[rerun]}, {})
    section.tables += [Table("whole command, seconds", t), Table("re-run, seconds", again)]
    section.checks += [
        ratio("serial / 2 workers", t, serial, workers, WORKERS_TARGET, why_missed=WORKERS_MISSED),
        ratio("first run / re-run (both --workers 2)", both, workers, rerun, RERUN_TARGET, why_missed=RERUN_MISSED),
    ]
    ray = statistics.median(start_cost)
    overhead = again.median(rerun)
    work = t.median(serial) - overhead
    section.figures.update({
        "`--serial` with one torch thread (OMP_NUM_THREADS=1), one run": f"{one_thread:.1f} s",
        "Ray start + shutdown alone (python -c 'ray.init(num_cpus=2); ray.shutdown()')": f"{ray:.1f} s",
        f"importing alone (python -c '{IMPORTS}')": f"{statistics.median(import_cost):.1f} s",
        "fixed cost of any `arena run` (the re-run: imports, plan, leaderboard, audit; report kept when up to date)":
            f"{overhead:.1f} s",
        "serial time spent on matchups (serial − re-run)": f"{work:.1f} s",
        "best possible with 2 workers (fixed cost + Ray start + matchups / 2)":
            f"{overhead + ray + work / 2:.1f} s, i.e. at most {t.median(serial) / (overhead + ray + work / 2):.2f}× "
            "faster than serial",
    })
    return section
