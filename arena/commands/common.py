"""What every ``arena`` subcommand shares: exit statuses, how input problems are reported (exit 2), how text from
plugins and files is shown, and the ``--trust`` option's module."""

from __future__ import annotations

import sys
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_INPUT, EXIT_VIOLATION, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def trust_module() -> Any:
    """``arena.trust``, imported when needed (it imports nothing else)."""
    from arena import trust

    return trust


def apply_trust(names: list[str]) -> None:
    """``--trust``: the names added to ``ARENA_TRUSTED`` (for this process and those it starts); registries built
    before are built again."""
    if names:
        trust_module().trust(names)
        if "arena.plugins" in sys.modules:
            sys.modules["arena.plugins"].forget_registries()


def third_party_lines(regs: object) -> list[str]:
    """One line per third-party distribution: name, version and where its code runs (or why it does not)."""
    return [d.describe() for d in getattr(regs, "distributions", ())]


def problems(lines: list[str]) -> int:
    """Each problem on standard error; exit status 2 (invalid input)."""
    from arena.pipeline.text import shown as escaped

    for line in lines:
        print(escaped(line), file=sys.stderr)
    return EXIT_INPUT


def shown(text: object) -> str:
    """One line from a plugin or a file, its control characters escaped."""
    from arena.pipeline.text import shown as escaped

    return escaped(text)


def printable(text: str) -> str:
    """A board, a table: control characters escaped (a label or a file may hold any), its lines kept."""
    from arena.pipeline.text import printable as escaped

    return escaped(text)
