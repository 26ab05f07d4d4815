"""The ``arena`` command: run, validate, leaderboard, report, plugins."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

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
    rep.add_argument("--formats", type=_vector_formats, default=(), metavar="svg,pdf",
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
    install.add_argument("--site", type=Path, help=f"the untrusted site (default: ${_trust().SITE_ENV}, else "
                         "$XDG_DATA_HOME/arena/untrusted-site)")
    install.add_argument("--pip-option", action="append", default=[], metavar="OPTION",
                         help="passed to pip (repeatable), e.g. --pip-option=--no-index")
    kernels = sub.add_parser("kernels", help="build the optional compiled CPU kernels for this machine (`make setup` "
                             "does), or say which are built")
    kernels.add_argument("action", nargs="?", choices=("build", "status"), default="status")
    for command in (run, val, plugins):
        command.add_argument("--trust", action="append", default=[], metavar="DIST",
                             help=f"trust this third-party distribution (repeatable; adds to ${_trust().TRUSTED_ENV}): "
                             "it may register attacks together with a defense, model, dataset, game or metric, "
                             "and its code then runs in the arena's process")
    return p


def _trust():  # noqa: ANN202 - the module, imported when the parser is built (it imports nothing else)
    from arena import trust

    return trust


def _apply_trust(names: list[str]) -> None:
    """``--trust``: the names added to ``ARENA_TRUSTED`` (for this process and those it starts); registries built
    before are built again."""
    if names:
        _trust().trust(names)
        if "arena.plugins" in sys.modules:
            sys.modules["arena.plugins"].forget_registries()


def third_party_lines(regs: object) -> list[str]:
    """One line per third-party distribution: name, version and where its code runs (or why it does not)."""
    return [d.describe() for d in getattr(regs, "distributions", ())]


def _problems(problems: list[str]) -> int:
    from arena.pipeline.text import shown

    for line in problems:
        print(shown(line), file=sys.stderr)
    return EXIT_INPUT


def cmd_validate(args: argparse.Namespace) -> int:
    from arena.api import rank_by_problems
    from arena.pipeline.plan import plan
    from arena.pipeline.scenario import ScenarioError

    _apply_trust(args.trust)

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
    from arena.pipeline.scenario import ScenarioError
    from arena.pipeline.store import RunDirError
    from arena.results import leaderboard

    if args.workers is not None and args.workers < 1:
        return _problems(["--workers: must be at least 1"])
    _apply_trust(args.trust)
    import arena.pipeline  # noqa: F401 - the sandbox's catalog: attack-only plugins are listed from there
    from arena.plugins import registries

    for line in third_party_lines(registries()):  # which third-party code runs where
        print(f"third-party: {_shown(line)}", file=sys.stderr)
    page = args.out / "report" / "index.html"
    try:
        results = api.run(args.scenarios, out=args.out, serial=args.serial, workers=args.workers,
                          address=args.address, verbose=args.verbose, report=not args.no_report,
                          fresh=args.fresh)
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
        print(f"warning: {_shown(line)}", file=sys.stderr)
    audit = results.audit
    print(_printable(leaderboard.render_table(results.boards())))
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


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from arena import api
    from arena.pipeline.store import RunDirError
    from arena.results import leaderboard
    from arena.results.merge import check_runs

    problems = check_runs(args.run_dirs)
    if problems:
        return _problems(problems)
    if args.history:
        return _history(args)
    try:
        results = api.load(args.run_dirs)
        boards = results.boards(metric=args.metric, track=args.track)
    except (FileNotFoundError, RunDirError) as exc:
        return _problems([str(exc)])
    except api.UnknownNameError as exc:
        return _problems([f"--{exc.kind}: unknown {exc.kind} {exc.name!r}; known: {', '.join(exc.known)}"])
    for line in getattr(getattr(results, "merged", None), "warnings", ()):
        print(f"warning: {_shown(line)}", file=sys.stderr)
    if args.format != "table":  # the table carries its warnings; keep CSV and JSON parseable
        for b in boards:
            for line in b.warnings:
                print(_shown(line), file=sys.stderr)
    render = {"table": leaderboard.render_table, "csv": leaderboard.render_csv, "json": leaderboard.render_json}
    print(_printable(render[args.format](boards)))
    return EXIT_OK


def _history(args: argparse.Namespace) -> int:
    """``arena leaderboard RUN... --history``: every matchup key of each run directory, one line each (its latest
    row), the superseded ones labelled; never averaged."""
    import pandas as pd

    from arena import api
    from arena.pipeline.store import RunDirError

    frames = []
    try:
        for run_dir in args.run_dirs:
            frame = api.load(run_dir).frame(history=True)
            if len(args.run_dirs) > 1:
                frame.insert(0, "run", run_dir.name)
            frames.append(frame)
    except (FileNotFoundError, RunDirError) as exc:
        return _problems([str(exc)])
    frame = pd.concat(frames, ignore_index=True)
    if args.track is not None:
        frame = frame[frame["track"] == args.track]
    if args.metric is not None and args.metric not in frame.columns:
        known = [c for c in frame.columns if c not in api.IDENTITY and c != "superseded" and
                 not c.startswith("versions.")]
        return _problems([f"--metric: unknown metric {args.metric!r}; known: {', '.join(known)}"])
    if args.format == "csv":
        print(_printable(frame.to_csv(index=False)), end="")
    elif args.format == "json":
        print(frame.to_json(orient="records", indent=2))
    else:
        shown = [c for c in ("run", "superseded", "track", "defense_label", "attack_label", "seed", "status",
                             "utility", args.metric, "versions.defense", "versions.attack") if c in frame.columns]
        print(_printable(frame[shown].to_string(index=False)) if len(frame) else "(no rows)")
    return EXIT_OK


def _vector_formats(text: str) -> tuple[str, ...]:
    """``--formats svg,pdf``: the vector formats named (``arena.results.report.plots.VECTOR``), or a usage error."""
    known = ("svg", "pdf")  # plots.VECTOR, without importing matplotlib to parse the command line
    names = tuple(dict.fromkeys(f.strip().lower() for f in text.split(",") if f.strip()))
    unknown = [f for f in names if f not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown figure format {', '.join(unknown) or repr(text)}; choose from "
                                         f"{', '.join(known)} (comma-separated)")
    return names


def cmd_report(args: argparse.Namespace) -> int:
    from arena.pipeline.store import RunDirError
    from arena.results.report.html import write_report

    try:
        path = write_report(args.run_dir, args.formats)
    except (FileNotFoundError, RunDirError) as exc:  # no results, or a damaged matchups.json
        return _problems([str(exc)])
    except OSError as exc:  # a read-only or full run directory
        return _problems([f"{exc.filename or args.run_dir}: cannot write the report: {exc.strerror or exc}"])
    print(path)
    return EXIT_OK


def cmd_publish(args: argparse.Namespace) -> int:
    """``arena publish RUN... --out DIR``: the static site of the run directories (``arena.results.publish``)."""
    from arena import api
    from arena.pipeline.store import RunDirError
    from arena.results.merge import check_runs

    problems = check_runs(args.run_dirs)
    if args.out.exists() and not args.out.is_dir():
        problems.append(f"--out: {args.out}: not a directory")
    if any(args.out.resolve() == d.resolve() for d in args.run_dirs):
        problems.append(f"--out: {args.out} is a run directory given; choose another folder for the site")
    if problems:
        return _problems(problems)
    try:
        results = api.load(args.run_dirs)
        page = results.publish(args.out)
    except (FileNotFoundError, RunDirError) as exc:
        return _problems([str(exc)])
    except OSError as exc:
        return _problems([f"{exc.filename or args.out}: cannot write the site: {exc.strerror or exc}"])
    for line in getattr(getattr(results, "merged", None), "warnings", ()):
        print(f"warning: {_shown(line)}", file=sys.stderr)
    print(page)
    return EXIT_OK


def cmd_evaluate(args: argparse.Namespace) -> int:
    """``arena evaluate FILE``: ``arena.evaluate`` of a scores file; a bad file is exit 2 naming the file and the
    field, and nothing is written."""

    from arena.games.membership.evaluate import EvaluationInputError, evaluate_file

    if args.resamples < 0:
        return _problems(["--resamples: must be at least 0"])
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        return _problems([f"--out: {args.out}: not a directory"])
    try:
        result = evaluate_file(args.file, resamples=args.resamples, seed=args.seed)
    except EvaluationInputError as exc:
        return _problems([f"{args.file}: {exc}"])
    return _evaluated(result, args)


def _evaluated(result: Any, args: argparse.Namespace) -> int:
    """The end of ``arena evaluate`` and ``arena evaluate-outputs``: the result's files into ``--out`` (a failed
    write is exit 2), then its board as a table or JSON."""
    import json

    if args.out is not None:
        try:
            written = result.save(args.out)
        except OSError as exc:
            return _problems([f"{exc.filename or args.out}: cannot write: {exc.strerror or exc}"])
        for path in written:
            print(f"wrote {path}", file=sys.stderr)
    print(json.dumps(result.as_dict(), indent=2) if args.format == "json" else result.table())
    return EXIT_OK


def cmd_evaluate_outputs(args: argparse.Namespace) -> int:
    """``arena evaluate-outputs FILE``: ``arena.evaluate_outputs`` of an outputs file; a bad file is exit 2 naming
    the file and the field, and nothing is written."""

    from arena.games.membership.evaluate import EvaluationInputError
    from arena.games.membership.outputs import evaluate_outputs

    if args.resamples < 0:
        return _problems(["--resamples: must be at least 0"])
    if not 0 < args.fpr < 1:
        return _problems(["--fpr: must be in (0, 1)"])
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        return _problems([f"--out: {args.out}: not a directory"])
    try:
        result = evaluate_outputs(args.file, fixed_variance=args.fixed_variance, fpr=args.fpr,
                                  resamples=args.resamples, seed=args.seed)
    except EvaluationInputError as exc:
        return _problems([f"{args.file}: {exc}"])
    return _evaluated(result, args)


def cmd_plugins(args: argparse.Namespace) -> int:
    if args.plugins_command == "install":
        return _install(args)
    _apply_trust(args.trust)
    import arena.pipeline  # noqa: F401 - installs the sandbox's catalog: attack-only plugins are listed from there
    from arena.plugins import registries

    regs = registries()
    print("plugins:")
    for info in regs.plugins:
        print(_shown(f"  {info.name:40} {info.distribution} {info.version} ({info.module})"))
    site = _trust().untrusted_site()
    print(_shown(f"third-party code (untrusted site: {site}{'' if site.is_dir() else ', absent'}):"))
    for line in third_party_lines(regs) or ["(none)"]:
        print(f"  {_shown(line)}")
    kinds = (("games", regs.games), ("datasets", regs.datasets), ("models", regs.models),
             ("defenses", regs.defenses), ("attacks", regs.attacks), ("metrics", regs.metrics))
    for kind, reg in kinds:
        print(f"{kind}:")
        for e in reg:
            print(_shown(f"  {e.name:24} from {e.distribution} {e.version}"))
    return EXIT_OK


def _install(args: argparse.Namespace) -> int:
    """``arena plugins install``: pip installs the distributions into the untrusted site (never the arena's
    environment), then lists what the attack sandbox finds there."""
    import subprocess

    trust = _trust()
    site = (args.site or trust.untrusted_site()).expanduser().absolute()
    if site.exists() and not site.is_dir():
        return _problems([f"--site: {site}: not a directory"])
    site.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(trust.install_command(list(args.sources), site, list(args.pip_option)), check=False)
    if done.returncode != 0:
        return _problems([f"pip could not install {' '.join(args.sources)} into {site} (exit {done.returncode})"])
    print(f"installed into the untrusted site {site}: only sandboxed attack processes load it"
          + ("" if args.site is None or str(site) == str(trust.untrusted_site()) else
             f"; set {trust.SITE_ENV}={site} for the arena to find it"))
    return EXIT_OK


def cmd_kernels(args: argparse.Namespace) -> int:
    from arena.engine import kernels

    try:
        return kernels.main([args.action])
    except ValueError as exc:  # ARENA_KERNELS set to something else than auto, off or on
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT


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
        print(f"plugin error: {_shown(exc)}", file=sys.stderr)
        return EXIT_INPUT


def _shown(text: object) -> str:
    from arena.pipeline.text import shown

    return shown(text)


def _printable(text: str) -> str:
    """A board, a table: control characters escaped (a label or a file may hold any), its lines kept."""
    from arena.pipeline.text import printable

    return printable(text)


def _plugin_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a ``PluginLoadError`` or ``RegistryError``: only a command that loaded the plugins can
    raise one, so a command that reads rows alone (``arena leaderboard``) never imports the plugin machinery."""
    kinds = tuple(getattr(sys.modules[module], name) for module, name in
                  (("arena.plugins", "PluginLoadError"), ("arena.registry", "RegistryError")) if module in sys.modules)
    return isinstance(exc, kinds)


if __name__ == "__main__":
    sys.exit(main())
