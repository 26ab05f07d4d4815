"""What a track's report section is given, and the Jinja2 environment every section renders with.

Templates live in ``arena/report/templates/`` (package data); autoescape is on for every template, so a string
from a plugin, a scenario or a result row is escaped where it is shown, and nothing is escaped by hand.
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from arena.audit import Audit, ArrayLoader
from arena.leaderboard import TrackBoard
from arena.report.plots import Figures
from arena.store import RunStore


def fmt(value: object, digits: int = 3) -> str:
    """A number for the page: fixed digits, '—' for none or NaN, yes/no for booleans."""
    if value is None:
        return "—"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (float, np.floating)):
        return "—" if math.isnan(value) else f"{value:.{digits}f}"
    return str(value)


def png_src(data: bytes) -> str:
    """A PNG as a data URI (the page stays one self-contained file)."""
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(loader=PackageLoader("arena.report", "templates"), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["fmt"] = fmt
    env.filters["png_src"] = png_src
    return env


def render(template: str, **context: Any) -> Markup:
    """``template`` rendered with ``context``; the result is markup, safe to place in another template."""
    return Markup(environment().get_template(template).render(**context))


@dataclass
class TrackContext:
    """One track as a game's section sees it."""

    board: TrackBoard
    rows: list[dict[str, Any]]  # the track's latest rows
    store: RunStore
    arrays: ArrayLoader
    figures: Figures
    audit: Audit
    extra: dict[str, Any] = field(default_factory=dict)
