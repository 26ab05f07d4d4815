"""What every game provides: its spec, checks, the release, the attacker's view, the scoring of a guess, its
metrics, its audit rule and its part of the report.

A game is a plugin (hook ``register_games``): a subclass of ``Game`` whose ``Spec`` validates the scenario's
``game:`` entry. The core (scenario, plan, execute, audit, report) only calls the methods below; it never names a
particular game. A game never depends on the core's report package: the report hands a game what it needs (a
context that renders the game's own templates, formats numbers and saves figures).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from arena.contracts.attack import Attack, Capability
from arena.contracts.dataset import Dataset
from arena.contracts.metric import Metric
from arena.contracts.release import Release
from arena.contracts.spec import GameSpec
from arena.contracts.view import View
from arena.run.procedure import TrainingProcedure

if TYPE_CHECKING:
    from arena.results.audit import ArrayLoader, GameAudit


@dataclass
class Outcome:
    """The scored result of one matchup: metrics, notes on what the sample cannot resolve, arrays to keep."""

    metrics: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


class Game:
    """Base class of games. The game holds the secret (membership labels, targets); attacks only get a view.

    Class attributes a game declares:

    * ``name``: what scenario files write under ``game: {name: ...}``;
    * ``Spec``: the pydantic model (a subclass of ``arena.run.scenario.GameSpec``, ``extra="forbid"``) of its
      parameters;
    * ``View``: the ``arena.contracts.view.View`` subclass its ``view`` returns, declaring its items, so that an
      attack can annotate ``run(self, view: MyView)``;
    * ``capabilities``: what an attack may ask for in this game;
    * ``metrics``: the ``arena.contracts.metric.Metric`` declarations of its scores (registered with the game);
    * ``template_dir``: the folder of its section templates (which may use the core's ``macros.html.j2``), or None.
    """

    name: ClassVar[str]
    capabilities: ClassVar[frozenset[Capability]]
    Spec: ClassVar[type[GameSpec]]
    View: ClassVar[type[View]] = View
    metrics: ClassVar[tuple[Metric, ...]] = ()
    template_dir: ClassVar[Path | None] = None
    audit_rule: ClassVar[str | None] = None
    """``"module:function"``: the game's audit rule ``function(rows, arrays) -> GameAudit``, imported on first use
    (so that playing a game never imports its audit or report code); None: no audit rule."""
    audit_view: ClassVar[str | None] = None
    """``"module:function"``: its part of the report's DP audit, ``function(audit, page) -> str``."""
    report_view: ClassVar[str | None] = None
    """``"module:function"``: its part of a track in the report, ``function(ctx) -> str``."""

    def __init__(self, spec: GameSpec, dataset: Dataset, seed: int) -> None:
        self.spec = spec
        self.dataset = dataset
        self.seed = seed

    def records(self, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Features and labels of the dataset rows ``idx`` as tensors."""
        return torch.from_numpy(self.dataset.X[idx]), torch.from_numpy(self.dataset.y[idx]).long()

    @classmethod
    def problems(cls, spec: GameSpec, dataset: Dataset) -> list[tuple[str, str]]:
        """(field, message) for every way ``spec`` cannot be played on ``dataset``."""
        need = spec.required_points()
        if need > dataset.n:
            return [("", f"needs {need} points but dataset {dataset.name!r} has {dataset.n}")]
        return []

    @classmethod
    def train_size(cls, spec: GameSpec) -> int:
        """Size of each released model's training set (DP defenses check δ < 1/n against it)."""
        raise NotImplementedError

    def release(self, procedure: TrainingProcedure) -> Release:
        """Train the released model(s) through ``procedure`` and measure their utility."""
        raise NotImplementedError

    def view(self, attack: Attack, release: Release, procedure: TrainingProcedure) -> View:
        """Exactly what ``attack`` may see of ``release`` (never the secret)."""
        raise NotImplementedError

    def score(self, attack: Attack, guess: Any) -> Outcome:
        """Check ``attack``'s guess and score it against the secret."""
        raise NotImplementedError

    def play(self, attack: Attack, release: Release, procedure: TrainingProcedure) -> Outcome:
        """Build the attack's view, run it, score its guess against the secret."""
        return self.score(attack, attack.run(self.view(attack, release, procedure)))

    def save_artifacts(self, outcome: Outcome, directory: Path) -> None:
        """Write files that illustrate ``outcome`` (e.g. pictures) into ``directory``; default: none."""

    # --- results: audit and report (class methods: they read result rows, never a live game) ---

    @classmethod
    def audit(cls, rows: Sequence[Mapping[str, Any]], arrays: ArrayLoader) -> GameAudit | None:
        """Audit this game's ok rows whose defense claims (ε, δ) (``arrays(key)`` loads a matchup's saved
        arrays) with its ``audit_rule``; None when the game has none."""
        return None if cls.audit_rule is None else _resolve(cls.audit_rule)(rows, arrays)

    @classmethod
    def audit_section(cls, audit: GameAudit | None, page: Any) -> str:
        """This game's part of the report's DP audit (``page.render(template, **context)`` renders one of its
        templates, ``page.fmt`` formats a number), by its ``audit_view``; default: nothing."""
        return "" if cls.audit_view is None else _resolve(cls.audit_view)(audit, page)

    @classmethod
    def report_section(cls, ctx: Any) -> str:
        """This game's part of a track in the report by its ``report_view``; ``ctx`` is
        ``arena.results.report.context.TrackContext`` (the track's board, rows, saved arrays, ``figures.save``,
        ``render``, ``fmt``); default: nothing."""
        return "" if cls.report_view is None else _resolve(cls.report_view)(ctx)


def _resolve(target: str) -> Callable[..., Any]:
    """The function named by ``"module:function"``."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)
