"""``arena evaluate`` and ``arena evaluate-outputs``: the arena's metrics of scores or outputs computed
elsewhere."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from arena.commands.common import EXIT_OK, problems


def cmd_evaluate(args: argparse.Namespace) -> int:
    """``arena evaluate FILE``: ``arena.evaluate`` of a scores file; a bad file is exit 2 naming the file and the
    field, and nothing is written."""

    from arena.games.membership.evaluate import EvaluationInputError, evaluate_file

    if args.resamples < 0:
        return problems(["--resamples: must be at least 0"])
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        return problems([f"--out: {args.out}: not a directory"])
    try:
        result = evaluate_file(args.file, resamples=args.resamples, seed=args.seed)
    except EvaluationInputError as exc:
        return problems([f"{args.file}: {exc}"])
    return evaluated(result, args)


def evaluated(result: Any, args: argparse.Namespace) -> int:
    """The end of ``arena evaluate`` and ``arena evaluate-outputs``: the result's files into ``--out`` (a failed
    write is exit 2), then its board as a table or JSON."""
    import json

    if args.out is not None:
        try:
            written = result.save(args.out)
        except OSError as exc:
            return problems([f"{exc.filename or args.out}: cannot write: {exc.strerror or exc}"])
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
        return problems(["--resamples: must be at least 0"])
    if not 0 < args.fpr < 1:
        return problems(["--fpr: must be in (0, 1)"])
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        return problems([f"--out: {args.out}: not a directory"])
    try:
        result = evaluate_outputs(args.file, fixed_variance=args.fixed_variance, fpr=args.fpr,
                                  resamples=args.resamples, seed=args.seed)
    except EvaluationInputError as exc:
        return problems([f"{args.file}: {exc}"])
    return evaluated(result, args)
