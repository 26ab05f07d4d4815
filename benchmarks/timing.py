"""The one timing protocol every pair shares, and the records a pair hands to the results writer.

Contenders of a comparison run side by side in one process, once per repeat, in an order rotated every repeat
(A B, then B A, ...) so that drift in machine load hits both alike. A ratio is computed per repeat, on times
taken minutes apart at most, and the reported figure is the median of those ratios, which one noisy repeat
cannot move.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class Timings:
    """Seconds per repeat of each contender, and what each call returned (for accuracy checks)."""

    seconds: dict[str, list[float]]
    results: dict[str, list[Any]]

    def median(self, label: str) -> float:
        return statistics.median(self.seconds[label])


def compare(
    contenders: dict[str, Callable[[int], Any]],
    repeats: int,
    warmup: bool = True,
    scale: dict[str, float] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Timings:
    """Time each contender ``fn(repeat)`` once per repeat, rotating the order; seconds are multiplied by ``scale``.

    ``warmup`` first calls each contender once untimed (with repeat -1), so one-off costs such as lazy
    imports, allocator growth and kernel selection are not charged to whichever runs first.
    ``scale`` turns a call's time into the unit compared (e.g. 1/epochs for per-epoch times). ``clock``:
    wall-clock by default; ``time.process_time`` (this process's CPU time) for in-process pairs on a shared
    machine, where other processes' load would otherwise land in whichever contender it hits.
    """
    if repeats < 1 or not contenders:
        raise ValueError("need at least one repeat and one contender")
    labels = list(contenders)
    if warmup:
        for label in labels:
            contenders[label](-1)
    seconds: dict[str, list[float]] = {label: [] for label in labels}
    results: dict[str, list[Any]] = {label: [] for label in labels}
    for r in range(repeats):
        shift = r % len(labels)
        for label in labels[shift:] + labels[:shift]:
            start = clock()
            out = contenders[label](r)
            seconds[label].append((clock() - start) * (scale or {}).get(label, 1.0))
            results[label].append(out)
    return Timings(seconds, results)


@dataclass(frozen=True)
class Check:
    """One figure against its target: ``value op target`` passes (op ``>=`` or ``<=``).

    ``per_repeat`` holds the per-repeat ratios when the value is a median of ratios. ``why_missed`` is what
    results.md says, when the target is missed, about the cause and what would close the gap.
    """

    name: str
    value: float
    target: float
    op: Literal[">=", "<="]
    unit: str = "×"
    per_repeat: tuple[float, ...] = ()
    why_missed: str = ""

    @property
    def passed(self) -> bool:
        return self.value >= self.target if self.op == ">=" else self.value <= self.target


def ratio(
    name: str,
    timings: Timings,
    numerator: str,
    denominator: str,
    target: float,
    op: Literal[">=", "<="] = ">=",
    why_missed: str = "",
) -> Check:
    """Median over repeats of time(numerator) / time(denominator), the two taken in the same repeat."""
    per_repeat = tuple(n / d for n, d in zip(timings.seconds[numerator], timings.seconds[denominator]))
    return Check(name, statistics.median(per_repeat), target, op, "×", per_repeat, why_missed)


@dataclass(frozen=True)
class Table:
    """One comparison's timings, shown as a table of per-repeat times in ``unit`` (a label of the scaled time)."""

    caption: str
    timings: Timings
    unit: str = "s"


@dataclass
class Section:
    """What one pair measured: how (``what``), its timing tables, the checks and any other figures."""

    key: str
    title: str
    what: str
    tables: list[Table] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    figures: dict[str, str] = field(default_factory=dict)


CPU = time.process_time
"""The clock of the in-process pairs: this process's CPU time, which other processes on a shared machine do not
inflate the way they inflate wall-clock time (torch runs one intra-op thread there, so CPU time ≈ wall time on an
idle machine)."""
