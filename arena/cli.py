"""The ``arena`` command: run, validate, leaderboard, report, plugins."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from arena._version import __version__

EXIT_OK, EXIT_FAILED, EXIT_INPUT, EXIT_VIOLATION, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
RUN_EXIT_STATUS = (
    "exit status: 0 all matchups ok; 1 some matchup failed (takes precedence); 2 invalid input; "
    "3 no failures, but the DP audit found a defense leaking more than its (ε, δ) claim; 130 interrupted"
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="arena", description="Privacy tournaments: defenses vs attacks.")
    p.add_argument("--version", action="version", version=f"privacy-arena {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="play every matchup of the scenario files into a run directory",
                         epilog=RUN_EXIT_STATUS)
    run.add_argument("scenarios", nargs="+", type=Path, help="scenario YAML files")
    run.add_argument("--out", type=Path, required=True, help="run directory (created; re-running resumes)")
    mode = run.add_mutually_exclusive_group()
    mode.add_argument("--serial", action="store_true", help="one matchup at a time, each in a child process (debugging)")
    mode.add_argument("--address", help="join an existing Ray cluster at this address instead of starting one")
    run.add_argument("--workers", type=int, help="cap on matchups running at once (default: all cores)")
    run.add_argument("--no-report", action="store_true", help="do not write RUN_DIR/report/index.html at the end")
    run.add_argument("--verbose", action="store_true", help="let Ray's own start-up messages and worker logs through")

    val = sub.add_parser("validate", help="check scenario files without running anything")
    val.add_argument("scenarios", nargs="+", type=Path)

    lb = sub.add_parser("leaderboard", help="print the leaderboard of a run directory")
    lb.add_argument("run_dir", type=Path)
    lb.add_argument("--format", choices=["table", "csv", "json"], default="table",
                    help="table (default); csv and json carry every metric with its interval")
    lb.add_argument("--metric", help="rank by this metric (e.g. tpr@1%%fpr, auc); default: the scenario's rank_by")
    lb.add_argument("--track", help="only this track")

    rep = sub.add_parser("report", help="write RUN_DIR/report/index.html (tables, plots, DP audit, timings)")
    rep.add_argument("run_dir", type=Path)

    sub.add_parser("plugins", help="list loaded plugins and what they register")
    return p


def _problems(problems: list[str]) -> int:
    for line in problems:
        print(line, file=sys.stderr)
    return EXIT_INPUT


def cmd_validate(args: argparse.Namespace) -> int:
    from arena.api import rank_by_problems
    from arena.pipeline.plan import plan
    from arena.pipeline.scenario import ScenarioError

    try:
        p = plan(args.scenarios)
    except ScenarioError as exc:
        return _problems(exc.problems)
    problems = rank_by_problems(p.scenarios)
    if problems:
        return _problems(problems)
    print(f"ok: {len(args.scenarios)} file(s), {len(p.matchups)} matchups")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    """``arena run``: ``arena.api.run`` plus what a terminal shows (warnings, the leaderboard, a summary)."""
    from arena import api
    from arena.results import leaderboard
    from arena.pipeline.scenario import ScenarioError
    from arena.pipeline.store import RunDirError

    if args.workers is not None and args.workers < 1:
        return _problems(["--workers: must be at least 1"])
    page = args.out / "report" / "index.html"
    try:
        results = api.run(args.scenarios, out=args.out, serial=args.serial, workers=args.workers,
                          address=args.address, verbose=args.verbose, report=not args.no_report)
    except ScenarioError as exc:
        return _problems(exc.problems)
    except RunDirError as exc:
        return _problems([str(exc)])
    except KeyboardInterrupt:
        print("interrupted: finished matchups are kept; re-run the same command to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as exc:  # a read-only, full or vanished run directory
        return _problems([f"{exc.filename or args.out}: cannot write the run directory: {exc.strerror or exc}"])
    for line in results.warnings:
        print(f"warning: {line}", file=sys.stderr)
    audit = results.audit
    print(leaderboard.render_table(results.boards()))
    counts = results.counts
    print(f"{len(results.rows)} matchups: {counts['ok']} ok, {counts['skipped']} skipped, {counts['failed']} failed; "
          f"results in {results.store.results_path}")
    tested = ", ".join(f"{g.tested} {name}" for name, g in audit.games.items() if g.tested) or "0"
    print(f"DP audit: {tested} matchup(s) against a claimed (ε, δ), {len(audit.violations)} violation(s) "
          f"(any game's violation sets exit status 3)"
          + (f"; {len(audit.missing_arrays)} not auditable (no saved scores)" if audit.missing_arrays else ""))
    if not args.no_report:
        suffix = " (no new results since it was written)" if not results.written else ""
        print(f"report: {page}{suffix}")
    return results.exit_status


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from arena import api
    from arena.results import leaderboard

    try:
        results = api.load(args.run_dir)
        boards = results.boards(metric=args.metric, track=args.track)
    except FileNotFoundError:
        return _problems([f"{args.run_dir}: no results.jsonl here"])
    except api.UnknownNameError as exc:
        return _problems([f"--{exc.kind}: unknown {exc.kind} {exc.name!r}; known: {', '.join(exc.known)}"])
    if args.format != "table":  # the table carries its warnings; keep CSV and JSON parseable
        for b in boards:
            for line in b.warnings:
                print(line, file=sys.stderr)
    render = {"table": leaderboard.render_table, "csv": leaderboard.render_csv, "json": leaderboard.render_json}
    print(render[args.format](boards))
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from arena.results.report.html import write_report

    try:
        path = write_report(args.run_dir)
    except FileNotFoundError as exc:
        return _problems([str(exc)])
    except OSError as exc:  # a read-only or full run directory
        return _problems([f"{exc.filename or args.run_dir}: cannot write the report: {exc.strerror or exc}"])
    print(path)
    return EXIT_OK


def cmd_plugins(args: argparse.Namespace) -> int:
    from arena.plugins import registries

    regs = registries()
    print("plugins:")
    for info in regs.plugins:
        print(f"  {info.name:40} {info.distribution} {info.version} ({info.module})")
    for kind, reg in (("games", regs.games), ("datasets", regs.datasets), ("models", regs.models), ("defenses", regs.defenses), ("attacks", regs.attacks),
                      ("metrics", regs.metrics)):
        print(f"{kind}:")
        for e in reg:
            print(f"  {e.name:24} from {e.distribution} {e.version}")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from arena.plugins import PluginLoadError
    from arena.registry import RegistryError

    handlers = {"run": cmd_run, "validate": cmd_validate, "leaderboard": cmd_leaderboard, "report": cmd_report,
                "plugins": cmd_plugins}
    try:
        return handlers[args.command](args)
    except (PluginLoadError, RegistryError) as exc:
        print(f"plugin error: {exc}", file=sys.stderr)
        return EXIT_INPUT


if __name__ == "__main__":
    sys.exit(main())
