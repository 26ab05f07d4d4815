"""The ``arena`` command: run, validate, leaderboard, report, plugins."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from arena._version import __version__
from arena.commands.common import (
    EXIT_FAILED,
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_VIOLATION,
    apply_trust,
    printable,
    problems,
    shown,
    third_party_lines,
    trust_module,
)
from arena.commands.evaluate import cmd_evaluate, cmd_evaluate_outputs
from arena.commands.plugins import cmd_kernels, cmd_plugins
from arena.commands.results import cmd_leaderboard, cmd_publish, cmd_report, vector_formats

__all__ = ["EXIT_FAILED", "EXIT_INPUT", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_VIOLATION", "main"]
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
    mode.add_argument("--serial", action="store_true",
                      help="one matchup at a time, each in a child process (debugging)")
    mode.add_argument("--address", help="join an existing Ray cluster at this address instead of starting one")
    run.add_argument("--workers", type=int, help="cap on matchups running at once (default: all cores)")
    run.add_argument("--no-report", action="store_true", help="do not write RUN_DIR/report/index.html at the end")
    run.add_argument("--verbose", action="store_true", help="let Ray's own start-up messages and worker logs through")
    run.add_argument("--fresh", action="store_true", help="ignore the run directory's cache: retrain every model and "
                     "play every matchup again (the new rows replace the old ones)")

    val = sub.add_parser("validate", help="check scenario files without running anything")
    val.add_argument("scenarios", nargs="+", type=Path)

    lb = sub.add_parser("leaderboard", help="print the leaderboard of a run directory, or of several merged into one "
                        "benchmark (seeds of the same definitions pooled, conflicting ones shown apart)")
    lb.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN", help="run directories (two or more: merged)")
    lb.add_argument("--format", choices=["table", "csv", "json"], default="table",
                    help="table (default); csv and json carry every metric with its interval")
    lb.add_argument("--metric", help="rank by this metric (e.g. tpr@1%%fpr, auc); default: the scenario's rank_by")
    lb.add_argument("--track", help="only this track")
    lb.add_argument("--history", action="store_true", help="list every matchup the run directory holds, one line "
                    "each, with a 'superseded' column: rows of earlier runs (another plugin version or source, other "
                    "parameters, another scenario) that the leaderboard leaves out")

    rep = sub.add_parser("report", help="write RUN_DIR/report/index.html (tables, plots, DP audit, timings)")
    rep.add_argument("run_dir", type=Path)
    rep.add_argument("--formats", type=vector_formats, default=(), metavar="svg,pdf",
                     help="also write every figure in these vector formats under RUN_DIR/report/figures/ (for "
                          "papers; default: none, the page embeds each figure as PNG)")

    pub = sub.add_parser("publish", help="write a static site of one or more run directories (merged as by "
                         "leaderboard): tracks, boards, methods, downloads, DP audit, a content hash per row")
    pub.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN", help="run directories (two or more: merged)")
    pub.add_argument("--out", type=Path, required=True, help="the site's directory (created; its pages replaced)")

    ev = sub.add_parser("evaluate", help="every membership metric, interval and the ROC figure of your own scores "
                        "(a .npz or .csv with scores and is_member, optionally decisions)")
    ev.add_argument("file", type=Path, metavar="FILE", help=".npz arrays or .csv columns: scores (higher means "
                    "member), is_member (0/1), optionally decisions (0/1)")
    ev.add_argument("--out", type=Path, help="also write metrics.json, metrics.csv and roc.{png,svg,pdf} here")
    ev.add_argument("--format", choices=["table", "json"], default="table")
    ev.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples for the intervals (default 1000)")
    ev.add_argument("--seed", type=int, default=0, help="seed of the bootstrap resamples")

    eo = sub.add_parser("evaluate-outputs", help="run LiRA, RMIA and the loss threshold on model outputs you saved "
                        "(target and reference logits or losses per record, an .npz), each evaluated as evaluate does")
    eo.add_argument("file", type=Path, metavar="FILE", help=".npz: target_logits or target_losses, labels, is_member, "
                    "reference_logits/losses and reference_in, population_* (see docs/publishing.md)")
    eo.add_argument("--out", type=Path, help="also write board.json, board.csv and each attack's metrics and ROC "
                    "figure (DIR/ATTACK/) here")
    eo.add_argument("--format", choices=["table", "json"], default="table")
    eo.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples for the intervals (default 1000)")
    eo.add_argument("--seed", type=int, default=0, help="seed of the bootstrap resamples")
    eo.add_argument("--fixed-variance", action="store_true", help="LiRA: one variance for all records (few references)")
    eo.add_argument("--fpr", type=float, default=0.1, help="population FPR the hard thresholds are set for (0.1)")

    plugins = sub.add_parser("plugins", help="list loaded plugins, what they register and where their code runs; "
                             "`arena plugins install` installs untrusted attack distributions")
    plugins_sub = plugins.add_subparsers(dest="plugins_command")
    install = plugins_sub.add_parser(
        "install", help="install attack distributions into the untrusted site, where only the attack sandbox "
        "loads them (never the arena's process, nor its start-up files)")
    install.add_argument("sources", nargs="+", metavar="PATH_OR_WHEEL",
                         help="wheels, source folders or requirements, as pip takes them (a wheel runs no code to "
                         "install; building a source folder runs its build code here)")
    install.add_argument("--site", type=Path, help=f"the untrusted site (default: ${trust_module().SITE_ENV}, else "
                         "$XDG_DATA_HOME/arena/untrusted-site)")
    install.add_argument("--pip-option", action="append", default=[], metavar="OPTION",
                         help="passed to pip (repeatable), e.g. --pip-option=--no-index")
    kernels = sub.add_parser("kernels", help="build the optional compiled CPU kernels for this machine (`make setup` "
                             "does), or say which are built")
    kernels.add_argument("action", nargs="?", choices=("build", "status"), default="status")
    for command in (run, val, plugins):
        command.add_argument("--trust", action="append", default=[], metavar="DIST",
                             help="trust this third-party distribution (repeatable; adds to "
                             f"${trust_module().TRUSTED_ENV}): "
                             "it may register attacks together with a defense, model, dataset, game or metric, "
                             "and its code then runs in the arena's process")
    return p


def cmd_validate(args: argparse.Namespace) -> int:
    from arena.api import rank_by_problems
    from arena.pipeline.plan import plan
    from arena.pipeline.scenario import ScenarioError

    apply_trust(args.trust)

    try:
        p = plan(args.scenarios)
    except ScenarioError as exc:
        return problems(exc.problems)
    found = rank_by_problems(p.scenarios)
    if found:
        return problems(found)
    print(f"ok: {len(args.scenarios)} file(s), {len(p.matchups)} matchups")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    """``arena run``: ``arena.api.run`` plus what a terminal shows (warnings, the leaderboard, a summary)."""
    from arena import api
    from arena.pipeline.scenario import ScenarioError
    from arena.pipeline.store import RunDirError
    from arena.results import leaderboard

    if args.workers is not None and args.workers < 1:
        return problems(["--workers: must be at least 1"])
    apply_trust(args.trust)
    import arena.pipeline  # noqa: F401 - the sandbox's catalog: attack-only plugins are listed from there
    from arena.plugins import registries

    for line in third_party_lines(registries()):  # which third-party code runs where
        print(f"third-party: {shown(line)}", file=sys.stderr)
    page = args.out / "report" / "index.html"
    try:
        results = api.run(args.scenarios, out=args.out, serial=args.serial, workers=args.workers,
                          address=args.address, verbose=args.verbose, report=not args.no_report,
                          fresh=args.fresh)
    except ScenarioError as exc:
        return problems(exc.problems)
    except RunDirError as exc:
        return problems([str(exc)])
    except KeyboardInterrupt:
        print("interrupted: finished matchups are kept; re-run the same command to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as exc:  # a read-only, full or vanished run directory
        return problems([f"{exc.filename or args.out}: cannot write the run directory: {exc.strerror or exc}"])
    for line in results.warnings:
        print(f"warning: {shown(line)}", file=sys.stderr)
    audit = results.audit
    print(printable(leaderboard.render_table(results.boards())))
    counts = results.counts
    print(f"{len(results.rows)} matchups: {counts['ok']} ok, {counts['skipped']} skipped, {counts['failed']} failed "
          f"({results.written} played by this run, {len(results.rows) - results.written} from earlier runs); "
          f"results in {results.store.results_path}")
    tested = ", ".join(f"{g.tested} {name}" for name, g in audit.games.items() if g.tested) or "0"
    print(f"DP audit: {tested} matchup(s) against a claimed (ε, δ), {len(audit.violations)} violation(s) "
          f"(any game's violation sets exit status 3)"
          + (f"; {len(audit.missing_arrays)} not auditable (no saved scores)" if audit.missing_arrays else ""))
    if not args.no_report:
        suffix = " (no new results since it was written)" if not results.written else ""
        print(f"report: {page}{suffix}")
    return results.exit_status


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handlers = {"run": cmd_run, "validate": cmd_validate, "leaderboard": cmd_leaderboard, "report": cmd_report,
                "plugins": cmd_plugins, "publish": cmd_publish, "evaluate": cmd_evaluate,
                "evaluate-outputs": cmd_evaluate_outputs, "kernels": cmd_kernels}
    try:
        return handlers[args.command](args)
    except Exception as exc:
        if not _plugin_error(exc):
            raise
        print(f"plugin error: {shown(exc)}", file=sys.stderr)
        return EXIT_INPUT


def _plugin_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a ``PluginLoadError`` or ``RegistryError``: only a command that loaded the plugins can
    raise one, so a command that reads rows alone (``arena leaderboard``) never imports the plugin machinery."""
    kinds = tuple(getattr(sys.modules[module], name) for module, name in
                  (("arena.plugins", "PluginLoadError"), ("arena.registry", "RegistryError")) if module in sys.modules)
    return isinstance(exc, kinds)




if __name__ == "__main__":
    sys.exit(main())
