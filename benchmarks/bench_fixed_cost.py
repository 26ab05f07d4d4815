"""s. The fixed cost of a tournament: the quickstart with every epoch count cut to one, against the quickstart.

Cutting every ``epochs`` to 1 (the tracks', the DP-SGD recipe's, the reconstruction attack's) leaves what a
matchup costs whatever it trains: the processes (the arena, its matchup worker, the sandbox's fork server and one
attack process per matchup), imports, planning, building each game and its views, querying, scoring with its
bootstrap draws, and the leaderboard, DP audit and report. Its CPU over the real quickstart's is the share of the
quickstart's CPU that is fixed cost. CPU time (user + system of every process the command started,
``benchmarks.cpu``) rather than wall time, so a busy machine hardly moves it. Run alone:
``python -m benchmarks --only s``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from benchmarks.cpu import cpu_of
from benchmarks.processes import ROOT
from benchmarks.timing import Section, Table, Timings, compare, ratio

SCENARIO = ROOT / "scenarios" / "quickstart.yaml"
TARGET = 0.25
WHY_MISSED = (
    "The quickstart trains little: its CPU less the 1-epoch copy's (the training the epochs buy) is a few dozen "
    "CPU seconds, so a 25 % share would leave the whole run about a third of that for everything else. Three "
    "parts stay above it (the figures above): the report, one figure per board in PNG, SVG and PDF and ROC "
    "figures holding every cell's curves (issue 41's post-processing side, outside the run time: the share "
    "without the report is given); what each matchup costs whatever it trains (its game and views built, the "
    "attack's process forked and its queries answered, 1,000 bootstrap draws, arrays, draws and artifacts written, "
    "each with its SHA-256 and HMAC; one epoch of every model, the reconstruction track's 600 shadow targets "
    "included); and the driver's imports, planning, leaderboard and DP audit (the re-run). The attack's process "
    "stays fresh per matchup by design (docs/reliability.md, \"Which processes are reused\"); the worker process, "
    "its imports and the fork server are no longer paid per matchup."
)


def _one_epoch(node: Any) -> Any:
    """``node`` with every ``epochs`` value, at any depth, set to 1."""
    if isinstance(node, dict):
        return {k: (1 if k == "epochs" else _one_epoch(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_one_epoch(v) for v in node]
    return node


def scenarios(quick: bool, folder: Path) -> tuple[Path, Path]:
    """The quickstart (quick mode: one seed, 4 shadows, 3 epochs) and its 1-epoch copy."""
    spec = yaml.safe_load(SCENARIO.read_text())
    if quick:
        spec["seeds"] = spec["seeds"][:1]
        for track in spec["tracks"]:
            track["training"]["epochs"] = 3
            for attack in track["attacks"]:
                if "shadows" in attack:
                    attack["shadows"] = 4
    real, one = folder / "quickstart.yaml", folder / "quickstart-1-epoch.yaml"
    real.write_text(yaml.safe_dump(spec, sort_keys=False))
    one.write_text(yaml.safe_dump({**_one_epoch(spec), "name": "quickstart-1-epoch"}, sort_keys=False))
    return real, one


def _arena(*args: str) -> list[str]:
    return [sys.executable, "-m", "arena.cli", *args]


def run(quick: bool, repeats: int) -> Section:
    section = Section(
        "s",
        "Fixed cost: the quickstart cut to 1 epoch vs the quickstart, CPU of the whole command",
        "CPU seconds (user + system, every process the command started) of `arena run FILE --out DIR --serial` "
        "from a fresh run directory, FILE the quickstart and a copy of it with every `epochs` set to 1 (tracks, "
        "DP-SGD's recipe, the reconstruction attack). The figure is the 1-epoch copy's CPU over the quickstart's: "
        "the share of the quickstart's CPU that does not depend on how long it trains. The re-run (the same "
        "command again on the finished 1-epoch directory: nothing is played) is the part any run pays once."
        + (" Quick mode: one seed, 3 epochs, 4 shadows." if quick else ""),
    )
    with tempfile.TemporaryDirectory(prefix="arena-bench-fixed-") as tmp:
        folder = Path(tmp)
        real, one = scenarios(quick, folder)
        labels = {"1 epoch": one, "quickstart": real}
        ran = compare({label: (lambda r, path=path, label=label: cpu_of(_arena(
            "run", str(path), "--out", str(folder / f"{label}-{r}"), "--serial"))) for label, path in labels.items()},
                      repeats, warmup=False)
        rerun = cpu_of(_arena("run", str(one), "--out", str(folder / "1 epoch-0"), "--serial"))
        report = cpu_of(_arena("report", str(folder / "1 epoch-0")))
    cpu = Timings({label: [c.cpu for c in ran.results[label]] for label in labels}, {})
    t = Timings({label: [c.wall for c in ran.results[label]] for label in labels}, {})
    section.tables += [Table("whole command, CPU seconds", cpu), Table("whole command, wall seconds", t)]
    section.checks.append(ratio("fixed-cost share: CPU(1 epoch) / CPU(quickstart)", cpu, "1 epoch", "quickstart",
                                TARGET, "<=", WHY_MISSED))
    matchups = 14 if quick else 28
    run_only = (cpu.median("1 epoch") - report.cpu) / (cpu.median("quickstart") - report.cpu)
    section.figures.update({
        "re-run of the finished 1-epoch directory (imports, planning, leaderboard, audit; report kept), CPU":
            f"{rerun.cpu:.1f} s",
        f"1 epoch, per matchup beyond the re-run ({matchups} matchups), CPU":
            f"{(cpu.median('1 epoch') - rerun.cpu) / matchups:.2f} s",
        "`arena report` of the finished 1-epoch directory alone (its figures, the same number as the "
        "quickstart's), CPU": f"{report.cpu:.1f} s",
        "fixed-cost share without the report (both runs less the report's CPU)": f"{run_only:.3f}",
    })
    return section
