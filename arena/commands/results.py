"""The commands that read run directories: ``arena leaderboard`` (and ``--history``), ``arena report``,
``arena publish``."""

from __future__ import annotations

import argparse
import sys

from arena.commands.common import EXIT_OK, printable, problems, shown


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from arena import api
    from arena.pipeline.store import RunDirError
    from arena.results import leaderboard
    from arena.results.merge import check_runs

    found = check_runs(args.run_dirs)
    if found:
        return problems(found)
    if args.history:
        return history(args)
    try:
        results = api.load(args.run_dirs)
        boards = results.boards(metric=args.metric, track=args.track)
    except (FileNotFoundError, RunDirError) as exc:
        return problems([str(exc)])
    except api.UnknownNameError as exc:
        return problems([f"--{exc.kind}: unknown {exc.kind} {exc.name!r}; known: {', '.join(exc.known)}"])
    for line in getattr(getattr(results, "merged", None), "warnings", ()):
        print(f"warning: {shown(line)}", file=sys.stderr)
    if args.format != "table":  # the table carries its warnings; keep CSV and JSON parseable
        for b in boards:
            for line in b.warnings:
                print(shown(line), file=sys.stderr)
    render = {"table": leaderboard.render_table, "csv": leaderboard.render_csv, "json": leaderboard.render_json}
    print(printable(render[args.format](boards)))
    return EXIT_OK


def history(args: argparse.Namespace) -> int:
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
        return problems([str(exc)])
    frame = pd.concat(frames, ignore_index=True)
    if args.track is not None:
        frame = frame[frame["track"] == args.track]
    if args.metric is not None and args.metric not in frame.columns:
        known = [c for c in frame.columns if c not in api.IDENTITY and c != "superseded" and
                 not c.startswith("versions.")]
        return problems([f"--metric: unknown metric {args.metric!r}; known: {', '.join(known)}"])
    if args.format == "csv":
        print(printable(frame.to_csv(index=False)), end="")
    elif args.format == "json":
        print(frame.to_json(orient="records", indent=2))
    else:
        shown = [c for c in ("run", "superseded", "track", "defense_label", "attack_label", "seed", "status",
                             "utility", args.metric, "versions.defense", "versions.attack") if c in frame.columns]
        print(printable(frame[shown].to_string(index=False)) if len(frame) else "(no rows)")
    return EXIT_OK


def vector_formats(text: str) -> tuple[str, ...]:
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
        return problems([str(exc)])
    except OSError as exc:  # a read-only or full run directory
        return problems([f"{exc.filename or args.run_dir}: cannot write the report: {exc.strerror or exc}"])
    print(path)
    return EXIT_OK


def cmd_publish(args: argparse.Namespace) -> int:
    """``arena publish RUN... --out DIR``: the static site of the run directories (``arena.results.publish``)."""
    from arena import api
    from arena.pipeline.store import RunDirError
    from arena.results.merge import check_runs

    found = check_runs(args.run_dirs)
    if args.out.exists() and not args.out.is_dir():
        found.append(f"--out: {args.out}: not a directory")
    if any(args.out.resolve() == d.resolve() for d in args.run_dirs):
        found.append(f"--out: {args.out} is a run directory given; choose another folder for the site")
    if found:
        return problems(found)
    try:
        results = api.load(args.run_dirs)
        page = results.publish(args.out)
    except (FileNotFoundError, RunDirError) as exc:
        return problems([str(exc)])
    except OSError as exc:
        return problems([f"{exc.filename or args.out}: cannot write the site: {exc.strerror or exc}"])
    for line in getattr(getattr(results, "merged", None), "warnings", ()):
        print(f"warning: {shown(line)}", file=sys.stderr)
    print(page)
    return EXIT_OK
