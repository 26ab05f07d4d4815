"""j. The tournament users run for a real privacy-utility regime: scenarios/digits-cnn.yaml, --serial vs
--workers 2."""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml

from benchmarks.bench_tournament import WORKERS_MISSED, WORKERS_TARGET
from benchmarks.processes import ROOT, arena_command, run_command
from benchmarks.timing import Section, Table, compare, ratio

SCENARIO = ROOT / "scenarios" / "digits-cnn.yaml"


def scenario(quick: bool, folder: Path) -> Path:
    """The scenario itself, or (quick mode) cut to one seed, one ε, 2 epochs and 4 shadows."""
    if not quick:
        return SCENARIO
    spec = yaml.safe_load(SCENARIO.read_text())
    spec["seeds"] = spec["seeds"][:1]
    for track in spec["tracks"]:
        track["training"]["epochs"] = 2
        for defense in track["defenses"]:
            if "epsilons" in defense:
                defense["epsilons"] = defense["epsilons"][-1:]
                defense.get("training", {})["epochs"] = 2
        for attack in track["attacks"]:
            if "shadows" in attack:
                attack["shadows"] = 4
    path = folder / "digits-cnn-quick.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def run(quick: bool, repeats: int) -> Section:
    section = Section(
        "j",
        "The digits CNN tournament: --serial vs 2 Ray workers",
        f"Wall time of the whole command, a fresh run directory each time: `arena run "
        f"{SCENARIO.relative_to(ROOT)} --out DIR --serial` vs `... --workers 2` (the CNN without privacy and "
        "under DP-SGD at four ε, attacked by the loss threshold, LiRA and RMIA on 32-shadow pools, two seeds). "
        "Each command is a fresh process: imports and Ray's start are included, as a user pays them."
        + (" Quick mode: one seed, one ε, 2 epochs, 4 shadow models." if quick else ""),
    )
    with tempfile.TemporaryDirectory(prefix="arena-bench-cnn-") as tmp:
        folder = Path(tmp)
        path = str(scenario(quick, folder))

        def fresh(r: int, mode: str) -> None:
            flags = ["--serial"] if mode == "serial" else ["--workers", "2"]
            run_command(arena_command("run", path, "--out", str(folder / f"{mode}-{r}"), *flags))

        serial, workers = "--serial", "--workers 2"
        t = compare({workers: lambda r: fresh(r, "workers"), serial: lambda r: fresh(r, "serial")}, repeats,
                    warmup=False)
    section.tables.append(Table("whole command, seconds", t))
    section.checks.append(ratio("digits CNN tournament: serial / 2 workers", t, serial, workers, WORKERS_TARGET,
                                why_missed="As for the quickstart (pair e, whose section has the figures named "
                                "here): " + WORKERS_MISSED))
    return section
