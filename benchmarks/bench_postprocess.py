"""i. Post-processing a 100-matchup run: the leaderboard from bootstrap draws saved when each matchup was scored vs
resampled from the saved scores on every call (the path before draws were saved), and the `arena leaderboard` and
`arena report` commands against their targets."""

from __future__ import annotations

import resource
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.processes import arena_command, run_command
from benchmarks.timing import CPU, Check, Section, Table, Timings, compare, ratio

SPEEDUP_TARGET = 5.0
LEADERBOARD_TARGET, REPORT_TARGET = 2.0, 20.0  # seconds, whole commands, 100 matchups on 2 cores
SCENARIO = {  # 5 defenses × 5 cheap attacks × 4 seeds = 100 matchups on digits with logistic regression
    "name": "postprocess-100",
    "seeds": [0, 1, 2, 3],
    "tracks": [{
        "name": "digits-logreg",
        "dataset": {"name": "digits"},
        "model": {"name": "logreg", "l2": 1.0e-3},
        "training": {"epochs": 5, "batch_size": 64, "lr": 0.1, "momentum": 0.9},
        "game": {"name": "membership", "members": 200},
        "defenses": [{"name": "nonprivate"}, {"name": "dpsgd", "epsilons": [1, 8], "delta": 1.0e-5, "clip": 1.0},
                     {"name": "output-perturbation", "epsilons": [1]}, {"name": "relaxloss", "alpha": 0.5}],
        "attacks": [{"name": "threshold-mia"}, {"name": "threshold-mia", "signal": "confidence"},
                    {"name": "shadow-mia", "shadows": 4, "classifier": "logistic"},
                    {"name": "lira", "shadows": 4, "fixed_variance": True}, {"name": "rmia", "shadows": 4}],
    }],
}
BEFORE = (
    "Before draws were saved (commit 106c522, measured once on this 2-core machine under the other sessions' load, "
    "same scenario): `arena leaderboard` 22.3 s wall (13–16 s CPU; 10.6 s of it resampling 100 matchups' scores "
    "on every call), `arena report` 65 s wall (39 s CPU: the resampling again, 21 figures drawn twice each for a "
    "tight bounding box, 15 audited-ROC panels of 400 points)."
)
MISSED_COMMAND = (
    "The command reads rows and the saved draws alone (neither torch, Ray, scipy.stats nor the plugins are imported: "
    "tests/results/test_leaderboard_imports.py); what is left is start-up: the interpreter, numpy, pandas (~0.3 s "
    "CPU) and the scenario model (pydantic, ~0.15 s) for the scenarios' rank_by. A first call after new results "
    "audits again and loads the plugins for the games' rules. What would close it: the boards without pandas."
)
MISSED_REPORT = (
    "The report draws each of its ~20 figures once as PNG (SVG and PDF only with `--formats`), a constrained "
    "layout each; the DP audit runs dp_accounting's replace-one PLD once per distinct claim (~1 s each). What "
    "would close it: the figures drawn in parallel processes."
)


def scenario(quick: bool, folder: Path) -> Path:
    spec = yaml.safe_load(yaml.safe_dump(SCENARIO))
    if quick:
        spec["seeds"] = [0]
        spec["tracks"][0]["training"]["epochs"] = 1
    path = folder / "postprocess.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _timed(command: list[str], cpu: list[float]) -> None:
    """Run ``command``; append its CPU seconds (user + system, its children included) to ``cpu``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run_command(command)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)


def run(quick: bool, repeats: int) -> Section:
    from arena import api
    from arena.results import leaderboard

    n = 25 if quick else 100
    section = Section(
        "i",
        f"Post-processing {n} matchups: saved bootstrap draws vs resampling on every call",
        f"A run of {n} matchups (digits, logistic regression, 5 epochs; nonprivate, DP-SGD at ε 1 and 8, output "
        "perturbation at ε 1, RelaxLoss × threshold (loss, confidence), Shokri (4 logistic shadows), LiRA (4 "
        "shadows) and RMIA (4 references); 4 seeds: below 5, so every interval is a bootstrap), played once with "
        "`arena run --serial`. In process: `leaderboard.build` of the run's rows reading the draws each matchup "
        "saved when it was scored (1000 per metric), vs resampling every matchup's saved scores (the path "
        "before draws were saved, still taken for a run without them); both get the same DP-audit findings, "
        "CPU seconds. Then the whole commands, each a fresh process: `arena leaderboard RUN` (the audit's findings "
        "kept in the run directory after the first call) and `arena report RUN`, checked in the CPU seconds of the "
        "command's process (what its wall time is on an otherwise idle core; wall clock beside, inflated by whatever "
        "else the machine runs)."
        + (" Quick mode: one seed, one epoch (25 matchups)." if quick else ""),
    )
    with tempfile.TemporaryDirectory(prefix="arena-bench-post-") as tmp:
        folder = Path(tmp)
        out = folder / "run"
        begin = time.perf_counter()
        run_command(arena_command("run", str(scenario(quick, folder)), "--out", str(out), "--serial", "--no-report"))
        played = time.perf_counter() - begin
        results = api.load(out)
        rows, findings, arrays = results.rows, results.findings(), results.arrays()
        saved, recomputed = "read the saved draws", "resample the saved scores"
        boards: dict[str, list] = {}

        def build(label: str, draws):
            def call(_r: int) -> None:
                boards[label] = leaderboard.build(rows, findings, rank_by=results.rank_by(), arrays=arrays,
                                                  draws=draws)
            return call

        t = compare({saved: build(saved, results.draws()), recomputed: build(recomputed, None)}, repeats, clock=CPU)
        same = all(a.intervals == b.intervals and a.utility_intervals == b.utility_intervals
                   for a, b in zip(boards[saved], boards[recomputed]))
        run_command(arena_command("leaderboard", str(out)))  # keeps the audit's findings, as `arena run` does
        cpu: dict[str, list[float]] = {"arena leaderboard": [], "arena report": []}
        commands = compare({"arena leaderboard": lambda r: _timed(arena_command("leaderboard", str(out)),
                                                                  cpu["arena leaderboard"]),
                            "arena report": lambda r: _timed(arena_command("report", str(out)), cpu["arena report"])},
                           repeats, warmup=False)
    cpu_commands = Timings(cpu, {})
    section.tables += [Table("leaderboard.build in process, CPU seconds", t),
                       Table("whole commands, wall-clock seconds", commands),
                       Table("whole commands, CPU seconds of the command's process (user + system; what its wall "
                             "time is on an otherwise idle core)", cpu_commands)]
    section.checks += [
        ratio("leaderboard: resampling / saved draws", t, recomputed, saved, SPEEDUP_TARGET),
        _seconds("`arena leaderboard`, 100 matchups, CPU" if not quick else "`arena leaderboard`, CPU", cpu_commands,
                 "arena leaderboard", LEADERBOARD_TARGET, MISSED_COMMAND),
        _seconds("`arena report`, 100 matchups, CPU" if not quick else "`arena report`, CPU", cpu_commands,
                 "arena report", REPORT_TARGET, MISSED_REPORT),
    ]
    section.figures.update({
        "playing the run (`arena run --serial`, once)": f"{played:.0f} s",
        "saved draws and resampled draws give the same intervals": "yes" if same else "**no**",
        "before": BEFORE,
    })
    return section


def _seconds(name: str, timings: Timings, label: str, target: float, why: str) -> Check:
    per = tuple(timings.seconds[label])
    return Check(name, timings.median(label), target, "<=", " s", per, why)
