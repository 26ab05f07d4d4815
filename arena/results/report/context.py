"""What a track's report section is given, and the Jinja2 environment every section renders with.

Templates live in ``arena/results/report/templates/`` (package data) and in each game's ``template_dir``;
autoescape is on for every template, so a string from a plugin, a scenario or a result row is escaped where it is
shown, and nothing is escaped by hand.
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
from jinja2 import ChoiceLoader, Environment, FileSystemLoader, PackageLoader, StrictUndefined
from markupsafe import Markup

from arena.contracts.arrays import ArrayLoader
from arena.pipeline.store import RunStore
from arena.results.audit import Audit
from arena.results.leaderboard import TrackBoard
from arena.results.report import plots
from arena.results.report.plots import Figures, RocCurve, RocPanel, slug


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


@lru_cache(maxsize=8)
def environment(game_templates: tuple[str, ...] = ()) -> Environment:
    """The report's templates, then those of the folders ``game_templates`` (a game's own section templates, which
    may import the core's ``macros.html.j2``)."""
    loader = ChoiceLoader([PackageLoader("arena.results.report", "templates"),
                           *(FileSystemLoader(d) for d in game_templates)])
    env = Environment(loader=loader, autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["fmt"] = fmt
    env.filters["png_src"] = png_src
    return env


def render(template: str, game_templates: tuple[str, ...] = (), **context: Any) -> Markup:
    """``template`` rendered with ``context``; the result is markup, safe to place in another template."""
    return Markup(environment(game_templates).get_template(template).render(**context))


def template_dirs(game: Any) -> tuple[str, ...]:
    """The template folder a game declares (``Game.template_dir``), as the environment's key."""
    folder = getattr(game, "template_dir", None)
    return (str(folder),) if folder is not None else ()


@dataclass
class Page:
    """What a game's part of the DP audit is given: ``render`` (its own templates), ``fmt``."""

    templates: tuple[str, ...] = ()

    def render(self, template: str, **context: Any) -> Markup:
        return render(template, self.templates, **context)

    fmt = staticmethod(fmt)


@dataclass
class TrackContext:
    """One track as a game's section sees it: its board, rows, saved arrays and audit; ``figures.save(fig, stem)``
    writes a figure and returns its PNG; ``render(template, **context)`` renders one of the game's templates;
    ``fmt`` formats a number; ``slug`` makes a file-name-safe stem; ``tradeoff(panels, stem)`` draws audited ROC
    curves (``ctx.RocPanel`` of ``ctx.RocCurve``) over their claim's trade-off curve and returns the markup."""

    board: TrackBoard
    rows: list[dict[str, Any]]  # the track's latest rows
    store: RunStore
    arrays: ArrayLoader
    figures: Figures
    audit: Audit
    extra: dict[str, Any] = field(default_factory=dict)
    templates: tuple[str, ...] = ()

    def render(self, template: str, **context: Any) -> Markup:
        """One of the game's templates, given ``context`` and ``anchor`` (the track's id on the page)."""
        return render(template, self.templates, **{"anchor": self.anchor, **context})

    @property
    def anchor(self) -> str:
        """The id of the track's part of the page (its parts' ids start with it)."""
        return "track-" + slug(self.board.track)

    fmt = staticmethod(fmt)
    slug = staticmethod(slug)
    # the audited-ROC panels a game hands to ``tradeoff`` (games build them from here: they never import the report)
    RocPanel = RocPanel
    RocCurve = RocCurve

    def tradeoff(self, panels: list[plots.RocPanel], stem: str, panels_per_figure: int = 12,
                 drawn: list[plots.RocPanel] | None = None, why: str = "") -> Markup:
        """Audited matchups' ROC curves over their claimed mechanism's trade-off curve (``plots.tradeoff_roc``,
        written as ``<stem>[-<n>]``, at most ``panels_per_figure`` panels a figure) with the table of measured
        and bounding TPRs at 0.1 %, 1 % and 10 % FPR of every panel; ``drawn``: the panels the figure shows (all
        by default), ``why`` one sentence for the page on how they were chosen; empty markup without panels."""
        if not panels:
            return Markup("")
        shown = panels if drawn is None else drawn
        styles = plots.defense_styles(self.board)
        pngs = [self.figures.save(plots.tradeoff_roc(shown[i : i + panels_per_figure], styles), stem)
                for i in range(0, len(shown), panels_per_figure)]
        return render("tradeoff.html.j2", track=self.board.track, anchor=self.anchor, pngs=pngs,
                      headers=plots.tradeoff_headers(), rows=plots.tradeoff_rows(panels), why=why)
