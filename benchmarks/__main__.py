"""Run the benchmark pairs and write results.md: ``python -m benchmarks [--quick] [--only a,c] [--repeats N]``."""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from benchmarks.timing import Check, Section

ROOT = Path(__file__).resolve().parent.parent
PAIRS = {
    "a": "benchmarks.bench_batched",
    "b": "benchmarks.bench_dpsgd",
    "d": "benchmarks.bench_reconstruction",
    "e": "benchmarks.bench_tournament",
    "f": "benchmarks.bench_memory",
    "g": "benchmarks.bench_engines",
    "h": "benchmarks.bench_pool",
    "i": "benchmarks.bench_postprocess",
    "j": "benchmarks.bench_tournament_cnn",
    "k": "benchmarks.gpu_check",
    "l": "benchmarks.bench_audit",
    "p": "benchmarks.bench_rows",
    "m": "benchmarks.bench_lm_dpsgd",
    "n": "benchmarks.gpu_check_lm",
    "r": "benchmarks.bench_parallel",
    "s": "benchmarks.bench_fixed_cost",
    "t": "benchmarks.bench_gradients",
}
ON_REQUEST = {"k", "n"}
"""Pairs a plain ``python -m benchmarks`` leaves out (``--only`` names them): k and n need a GPU (``make gpu-check``,
``make gpu-check-lm``)."""
PACKAGES = ("torch", "numpy", "scipy", "scikit-learn", "opacus", "adversarial-robustness-toolbox", "ray")
PROTOCOL = (
    "Contenders of a pair run side by side in one process (the tournament: one child process per command), "
    "once per repeat, in an order rotated every repeat, after one untimed warm-up call each (except where a "
    "section says otherwise). Each ratio is computed within a repeat; the figure is the median of the "
    "per-repeat ratios. In-process pairs (a, b, g, h, l, t) are timed in CPU time of the benchmark process "
    "(`time.process_time`), so that other processes on a shared machine do not inflate one contender; d and the "
    "commands of e, f, j and r are timed wall-clock (`time.perf_counter`); s compares the CPU time (user + "
    "system) of every process its commands started (`benchmarks/cpu.py`), which r records beside its wall times. "
    "In-process pairs (a, b, d, g, h, t) run "
    "torch on one intra-op thread (`--threads`, default 1): most baselines are single-threaded (scikit-learn's "
    "solvers, scipy's L-BFGS inside ART, per-model Python loops), so the ratios compare work per core, and one thread "
    "keeps the figures stable on a shared machine. The commands of e, f and j run with their defaults, as a "
    "user's would."
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of every pair, not a measurement")
    p.add_argument("--only", default=",".join(k for k in PAIRS if k not in ON_REQUEST),
                   help="comma-separated pairs to run (default: all but k, the GPU check)")
    p.add_argument("--repeats", type=int, help="repeats per pair (default 3; 1 with --quick)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads in this process (default 1; 0: torch's own choice); child processes keep theirs")
    p.add_argument("--carry", type=Path,
                   help="an earlier results.md: its sections for pairs not run now are kept, marked as carried over")
    p.add_argument("--note", default="", help="a sentence for results.md about the conditions of this run")
    p.add_argument("--out", type=Path, help="results file (default benchmarks/results.md; "
                                            "runs/bench-quick/results.md with --quick)")
    return p


def _cpu_model() -> str:
    fields: dict[str, str] = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name") or platform.processor() or platform.machine()
    return f"{name} (family {fields.get('cpu family', '?')}, model {fields.get('model', '?')})"


def _meminfo_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 1024**2
    return float("nan")


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def _git() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return f"{commit}{' + uncommitted changes' if git('status', '--porcelain') else ''}"


def machine() -> dict[str, str]:
    """What the figures depend on: hardware, library versions, threads, and how busy the machine was."""
    import torch

    load = os.getloadavg()
    return {
        "CPU": _cpu_model(),
        "cores": f"{os.cpu_count()} logical, {len(os.sched_getaffinity(0))} usable by this process",
        "RAM": f"{_meminfo_gib():.1f} GiB",
        "OS": f"{platform.system()} {platform.release()}",
        "Python": platform.python_version(),
        "packages": ", ".join(f"{p} {_version(p)}" for p in PACKAGES),
        "torch threads": f"{torch.get_num_threads()} intra-op, {torch.get_num_interop_threads()} inter-op "
                         f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}); CPU capability "
                         f"{torch.backends.cpu.get_cpu_capability()}",
        "load average at start (1, 5, 15 min)": ", ".join(f"{x:.2f}" for x in load),
    }


def _fmt(x: float) -> str:
    if x != 0 and (abs(x) < 0.001 or abs(x) >= 1e5):
        return f"{x:.2e}"
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _check_row(check: Check) -> str:
    per = ", ".join(_fmt(v) for v in check.per_repeat) or "–"
    verdict = "PASS" if check.passed else "**MISS**"
    return (
        f"| {check.name} | {per} | **{_fmt(check.value)}{check.unit}** | "
        f"{check.op} {_fmt(check.target)}{check.unit} | {verdict} |"
    )


def render_section(section: Section) -> list[str]:
    lines = [f"## {section.key}. {section.title}", "", section.what, ""]
    for table in section.tables:
        n = max(len(v) for v in table.timings.seconds.values())
        lines += [f"*{table.caption}* ({table.unit})", "",
                  "| contender | " + " | ".join(f"repeat {i + 1}" for i in range(n)) + " | median |",
                  "|---|" + "---|" * (n + 1)]
        for label, secs in table.timings.seconds.items():
            lines.append(
                f"| {label} | " + " | ".join(_fmt(s) for s in secs) + f" | {_fmt(table.timings.median(label))} |"
            )
        lines.append("")
    if section.checks:
        lines += ["| figure | per repeat | median | target | result |", "|---|---|---|---|---|"]
        lines += [_check_row(c) for c in section.checks] + [""]
    if section.figures:
        lines += [f"- {name}: {value}" for name, value in section.figures.items()] + [""]
    missed = [c for c in section.checks if not c.passed]
    for c in missed:
        lines += [f"**Missed: {c.name}.** {c.why_missed or 'No explanation recorded.'}", ""]
    return lines


def carried_sections(text: str, skip: set[str]) -> tuple[str, dict[str, list[str]], dict[str, str]]:
    """From an earlier results.md: its provenance line, its summary rows and its full sections by pair, for the
    pairs not in ``skip``."""
    provenance = next((line for line in text.splitlines() if line.startswith("Produced by")), "an earlier run")
    provenance = provenance.split(". `make bench`")[0].removeprefix("Produced by ")
    cpu = next((line.split("|")[2].strip() for line in text.splitlines() if line.startswith("| CPU |")), None)
    provenance += f", on {cpu}" if cpu else ""
    rows: dict[str, list[str]] = {}
    summary = text.split("## Summary", 1)[1].split("\n## ", 1)[0] if "## Summary" in text else ""
    for line in summary.splitlines():
        parts = line.split("|")
        key = parts[1].strip().removesuffix(" (earlier run)") if len(parts) > 2 else ""
        if len(key) == 1 and key not in skip:  # a row carried before keeps its pair's key
            rows.setdefault(key, []).append(line.replace(f"| {key} (earlier run) |", f"| {key} |", 1))
    bodies = {}
    for chunk in text.split("\n## ")[1:]:
        key = chunk[:2]
        if key[1:] == "." and key[0] not in skip and key[0] in PAIRS:
            bodies[key[0]] = "## " + chunk.rstrip()
    return provenance, rows, bodies


_CARRIED = "*Carried over unchanged from "


def carried_line(body: str, provenance: str) -> str:
    """Where a carried section was measured: its own first carry's line if it was carried before (the run that
    measured it), else the run of the file it comes from (``provenance``, with that file's machine)."""
    earlier = [line for line in body.splitlines() if line.startswith(_CARRIED)]
    return earlier[-1] if earlier else f"{_CARRIED}{provenance}; not re-measured in this run.*"


def _without_carried_lines(body: str) -> str:
    return "\n".join(line for line in body.splitlines() if not line.startswith(_CARRIED))


def render(sections: list[Section], info: dict[str, str], command: str, started: datetime, minutes: float,
           carried: str | None = None, note: str = "") -> str:
    """results.md: provenance, machine, a summary of every check, then each pair in full; pairs not run now are
    carried over from ``carried`` (an earlier results.md), marked as such."""
    provenance, old_rows, old_bodies = carried_sections(carried, {s.key for s in sections}) if carried else ("", {}, {})
    lines = [
        "# privacy-arena benchmarks",
        "",
        f"Produced by `{command}` on {started:%Y-%m-%d %H:%M} UTC at commit {_git()}, in {minutes:.1f} minutes. "
        "`make bench` reproduces it (it installs the `bench` extra, then runs `python -m benchmarks`).",
        "",
        PROTOCOL,
        "",
        *([f"**Note on this run:** {note}", ""] if note else []),
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in info.items()],
        "",
        "## Summary",
        "",
        "| pair | figure | measured | target | result |",
        "|---|---|---|---|---|",
    ]
    for s in sections:
        for c in s.checks:
            verdict = "PASS" if c.passed else "**MISS**"
            lines.append(
                f"| {s.key} | {c.name} | {_fmt(c.value)}{c.unit} | {c.op} {_fmt(c.target)}{c.unit} | {verdict} |"
            )
    for key in sorted(old_rows):
        lines += [row.replace(f"| {key} |", f"| {key} (earlier run) |", 1) for row in old_rows[key]]
    lines.append("")
    for s in sections:
        lines += render_section(s)
    for key in sorted(old_bodies):
        header, _, body = old_bodies[key].partition("\n")
        lines += [header, "", carried_line(body, provenance), _without_carried_lines(body), ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    keys = [k.strip() for k in args.only.split(",") if k.strip()]
    unknown = [k for k in keys if k not in PAIRS]
    if unknown:
        _parser().error(f"unknown pair(s) {', '.join(unknown)}; choose from {', '.join(PAIRS)}")
    repeats = args.repeats or (1 if args.quick else 3)
    out = args.out or ROOT / ("runs/bench-quick/results.md" if args.quick else "benchmarks/results.md")
    import torch

    threads = torch.get_num_threads()
    if args.threads:
        torch.set_num_threads(args.threads)
    command = " ".join(["python -m benchmarks", *(sys.argv[1:] if argv is None else argv)])
    carried = args.carry.read_text(encoding="utf-8") if args.carry else None
    out.parent.mkdir(parents=True, exist_ok=True)

    def write(sections: list[Section], info: dict[str, str], started: datetime, minutes: float) -> None:
        out.write_text(render(sections, info, command, started, minutes, carried, args.note), encoding="utf-8")

    try:
        _run_pairs(keys, args.quick, repeats, write)
    finally:
        torch.set_num_threads(threads)
    print(f"[bench] wrote {out}", file=sys.stderr)
    return 0


def _run_pairs(keys: list[str], quick: bool, repeats: int, write) -> None:
    """Run the chosen pairs in order, printing each verdict as it comes and writing the results file after each
    pair (so that a long run interrupted late keeps what it measured)."""
    started, clock = datetime.now(timezone.utc), time.perf_counter()
    info = machine()
    sections = []
    for key in keys:
        begin = time.perf_counter()
        print(f"[bench] {key}: {PAIRS[key]} ...", file=sys.stderr, flush=True)
        sections.append(importlib.import_module(PAIRS[key]).run(quick, repeats))
        for check in sections[-1].checks:
            print(f"[bench]   {check.name}: {_fmt(check.value)}{check.unit} (target {check.op} "
                  f"{_fmt(check.target)}{check.unit}) {'PASS' if check.passed else 'MISS'}", file=sys.stderr)
        print(f"[bench] {key} done in {time.perf_counter() - begin:.0f} s", file=sys.stderr, flush=True)
        info["load average at end (1, 5, 15 min)"] = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        write(sections, info, started, (time.perf_counter() - clock) / 60)


if __name__ == "__main__":
    sys.exit(main())
