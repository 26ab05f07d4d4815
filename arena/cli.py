"""The ``arena`` command: run, validate, leaderboard, report, plugins."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from arena import __version__

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
    lb.add_argument("--format", choices=["table", "csv", "json"], default="table")

    rep = sub.add_parser("report", help="write RUN_DIR/report/index.html (tables, plots, DP audit, timings)")
    rep.add_argument("run_dir", type=Path)

    sub.add_parser("plugins", help="list loaded plugins and what they register")
    return p


def _problems(problems: list[str]) -> int:
    for line in problems:
        print(line, file=sys.stderr)
    return EXIT_INPUT


def cmd_validate(args: argparse.Namespace) -> int:
    from arena.plan import plan
    from arena.scenario import ScenarioError

    try:
        p = plan(args.scenarios)
    except ScenarioError as exc:
        return _problems(exc.problems)
    print(f"ok: {len(args.scenarios)} file(s), {len(p.matchups)} matchups")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from arena.plan import plan
    from arena.scenario import ScenarioError
    from arena.store import RunDirError, RunStore

    if args.workers is not None and args.workers < 1:
        return _problems(["--workers: must be at least 1"])
    try:
        p = plan(args.scenarios, local=args.address is None)
    except ScenarioError as exc:
        return _problems(exc.problems)
    store = RunStore(args.out)
    try:
        store.check_ours()
        store.root.mkdir(parents=True, exist_ok=True)
        with store.lock():
            store.mark()
            for line in store.set_aside():
                print(f"warning: {line}", file=sys.stderr)
            return _play(args, p, store)
    except RunDirError as exc:
        return _problems([str(exc)])
    except OSError as exc:  # a read-only, full or vanished run directory
        return _problems([f"{exc.filename or args.out}: cannot write the run directory: {exc.strerror or exc}"])


def _play(args: argparse.Namespace, p, store) -> int:  # noqa: ANN001 - a Plan and a RunStore
    """Play the plan into the locked run directory, then print the leaderboard and write the report."""
    from arena import leaderboard, tournament
    from arena.audit import audit_store, violation_findings

    for path, scenario in p.scenarios:
        store.write_text(f"scenarios/{scenario.name}.yaml", Path(path).read_text(encoding="utf-8"))
    try:
        written = tournament.run(p, store, serial=args.serial, workers=args.workers, address=args.address,
                                 verbose=args.verbose)
    except KeyboardInterrupt:
        print("interrupted: finished matchups are kept; re-run the same command to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    rows = leaderboard.latest_rows(store.results())
    keys = {m.key for m in p.matchups}
    rows = [r for r in rows if r["key"] in keys]
    audit = audit_store(store, rows)
    print(leaderboard.render_table(leaderboard.build(rows, violation_findings(audit))))
    failed = [r for r in rows if r["status"] == "failed"]
    counts = {s: sum(r["status"] == s for r in rows) for s in ("ok", "skipped", "failed")}
    print(f"{len(rows)} matchups: {counts['ok']} ok, {counts['skipped']} skipped, {counts['failed']} failed; "
          f"results in {store.results_path}")
    print(f"DP audit: {len(audit.membership)} membership matchups against a claimed (ε, δ), "
          f"{len(audit.violations)} violation(s)"
          + (f"; {len(audit.missing_arrays)} not auditable (no saved scores)" if audit.missing_arrays else ""))
    report = store.root / "report" / "index.html"
    if not args.no_report and not written and report.exists():
        print(f"report: {report} (no new results since it was written)")
    elif not args.no_report:
        from arena.report.html import write_report

        print(f"report: {write_report(store.root)}")
    if failed:
        return EXIT_FAILED
    return EXIT_VIOLATION if audit.violations else EXIT_OK


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from arena import leaderboard
    from arena.audit import audit_store, violation_findings
    from arena.store import RunStore

    store = RunStore(args.run_dir)
    if not store.results_path.exists():
        return _problems([f"{args.run_dir}: no results.jsonl here"])
    rows = leaderboard.latest_rows(store.results())
    boards = leaderboard.build(rows, violation_findings(audit_store(store, rows)))
    render = {"table": leaderboard.render_table, "csv": leaderboard.render_csv, "json": leaderboard.render_json}
    print(render[args.format](boards))
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from arena.report.html import write_report

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
    for kind, reg in (("datasets", regs.datasets), ("models", regs.models), ("defenses", regs.defenses), ("attacks", regs.attacks),
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
