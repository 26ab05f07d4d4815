"""Progress of a running tournament: matchups done, running and failed out of the total, with an ETA.

On a terminal one status line is redrawn in place (carriage return); elsewhere (CI logs, pipes) plain lines
are printed: the first finished matchup, then at most one every ``interval`` seconds, every failure, and the
last. Failures are always printed on a line of their own so they stay visible after the status line moves on.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from arena.pipeline.text import shown


def format_duration(seconds: float) -> str:
    """Seconds as 'H:MM:SS' (or 'M:SS' under an hour)."""
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """Counts matchups by state for one call of the tournament and reports them on ``stream``."""

    def __init__(
        self,
        total: int,
        stream: TextIO | None = None,
        *,
        interval: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.clock = clock
        self.done = 0
        self.failed = 0
        self.running = 0
        self.start = clock()
        self._last_print: float | None = None
        self._width = 0
        isatty = getattr(self.stream, "isatty", None)
        self.live = bool(isatty and isatty())

    def started(self, n_running: int) -> None:
        """Record how many matchups are in flight now (redraws the line on a terminal)."""
        self.running = n_running
        if self.live:
            self._draw()

    def finished(self, row: dict[str, Any]) -> None:
        """Record one finished matchup (its result row) and report progress."""
        self.done += 1
        self.running = max(0, self.running - 1)
        failed = row.get("status") == "failed"
        self.failed += failed
        if failed:
            self._line(
                f"FAILED {row.get('track')} {row.get('defense_label')} vs {row.get('attack_label')} "
                f"seed {row.get('seed')}: "
                f"{row.get('error')}"
            )
        if self.live:
            self._draw()
            if self.done >= self.total:
                self.stream.write("\n")
                self.stream.flush()
            return
        now = self.clock()
        due = self._last_print is None or now - self._last_print >= self.interval
        if due or failed or self.done >= self.total:
            self._last_print = now
            self._line(f"{self.status()}; last: {_describe(row)}")

    def eta(self) -> float | None:
        """Seconds left at the mean pace so far; None before the first matchup finishes."""
        if self.done == 0:
            return None
        return (self.clock() - self.start) / self.done * (self.total - self.done)

    def status(self) -> str:
        eta = self.eta()
        return (
            f"matchups {self.done}/{self.total} done, {self.running} running, {self.failed} failed; "
            f"elapsed {format_duration(self.clock() - self.start)}, "
            f"eta {'?' if eta is None else format_duration(eta)}"
        )

    def _draw(self) -> None:
        text = shown(self.status())
        pad = max(0, self._width - len(text))
        self._width = len(text)
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()

    def _line(self, text: str) -> None:
        """A line of its own; on a terminal it replaces the status line, which is redrawn afterwards."""
        if self.live and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self._width = 0
        self.stream.write(shown(text) + "\n")  # a row's error or label: escaped, its newlines prefixed
        self.stream.flush()


def _describe(row: dict[str, Any]) -> str:
    seconds = row.get("seconds")
    took = f" in {seconds:.1f}s" if isinstance(seconds, (int, float)) else ""
    return (
        f"{row.get('track')} {row.get('defense_label')} vs {row.get('attack_label')} seed {row.get('seed')}: "
        f"{row.get('status')}{took}"
    )
