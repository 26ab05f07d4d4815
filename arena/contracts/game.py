"""What every game provides: its spec, checks, the release, the attacker's view, the scoring of a guess, its
metrics, its audit rule and its part of the report.

A game is a plugin (hook ``register_games``): a subclass of ``Game`` whose ``Spec`` validates the scenario's
``game:`` entry. The core (scenario, plan, execute, audit, report) only calls the methods below; it never names a
particular game. A game never depends on the core's report package: the report hands a game what it needs (a
context that renders the game's own templates, formats numbers and saves figures).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from arena.contracts.attack import Attack, Capability
from arena.contracts.dataset import Dataset
from arena.contracts.metric import Metric
from arena.contracts.procedure import Procedure
from arena.contracts.release import Release
from arena.contracts.spec import GameSpec
from arena.contracts.view import View, view_capabilities
from arena.contracts.view import View as _AnyView  # for annotations inside Game, whose ``View`` is a class attribute


@dataclass
class Outcome:
    """The scored result of one matchup: metrics, notes on what the sample cannot resolve, arrays to keep, and
    ``operating_points``: metric name → the operating point behind a rate at a fixed error rate (a TPR at an FPR:
    ``{"threshold", "fpr", "false_positives", "nonmembers", "true_positives", "members"}``), kept in the row."""

    metrics: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    operating_points: dict[str, dict[str, Any]] = field(default_factory=dict)


class _Granted:
    """``Game.capabilities``: every capability that grants an item of the game's ``View`` (declared there once)."""

    def __get__(self, obj: object, owner: type[Game]) -> frozenset[Capability]:
        return view_capabilities(owner.View)


class Game(abc.ABC):
    """Base class of games. The game holds the secret (membership labels, targets); attacks only get a view.

    Class attributes a game declares:

    * ``name``: what scenario files write under ``game: {name: ...}``;
    * ``Spec``: the pydantic model (a subclass of ``arena.GameSpec``, ``extra="forbid"``) of its parameters;
    * ``View``: the ``arena.View`` subclass its ``view`` returns, declaring its items and the capability that
      grants each (``arena.Grant``), so that an attack can annotate ``run(self, view: MyView)``; what an attack
      of this game may ask for (``capabilities``) is read from it;
    * ``metrics``: the ``arena.Metric`` declarations of its scores (registered with the game);
    * ``template_dir``: the folder of its section templates (which may use the core's ``macros.html.j2``), or None;
    * ``audit_rule``, ``audit_view``, ``report_view``: its audit and its parts of the report, each named as
      ``"module:function"`` and imported only when the results are audited or reported (None: it has none).
    """

    name: ClassVar[str]
    capabilities: ClassVar[frozenset[Capability]] = _Granted()  # type: ignore[assignment]  # read from View
    Spec: ClassVar[type[GameSpec]]
    View: ClassVar[type[View]] = View
    Guess: ClassVar[type] = object
    """The dataclass an attack of this game returns: the only class its guess is rebuilt as when it comes back
    from the attack's process (``object``: none declared, and the dataclasses of the game's module are taken)."""
    metrics: ClassVar[tuple[Metric, ...]] = ()
    reports_metrics_of: ClassVar[tuple[str, ...]] = ()
    """Other games whose registered metrics this game's rows carry too (the language game scores membership with
    the membership game's metrics, registered once, by that game)."""
    template_dir: ClassVar[Path | None] = None
    audit_rule: ClassVar[str | None] = None
    """``"module:function"``: the game's audit rule ``function(rows, arrays) -> GameAudit | None`` over its ok rows
    whose defense claims (ε, δ) (``arrays(key)`` loads a matchup's saved arrays)."""
    audit_view: ClassVar[str | None] = None
    """``"module:function"``: its part of the report's DP audit, ``function(audit, page) -> str``
    (``page.render(template, **context)`` renders one of its templates, ``page.fmt`` formats a number)."""
    report_view: ClassVar[str | None] = None
    """``"module:function"``: its part of a track in the report, ``function(ctx) -> str``; ``ctx`` holds the
    track's board, rows, saved arrays, ``figures.save``, ``render`` and ``fmt``."""
    version: ClassVar[str] = "1"
    """Recorded in every matchup key and row; raise it when the game's protocol or scoring changes."""
    primary_metric: ClassVar[str | None] = None
    """The metric shown beside the ranking one (written into every row, so the leaderboard needs no plugin); None:
    none beside it."""
    rank_metric: ClassVar[str | None] = None
    """The ranking metric when the scenario names none; None: ``primary_metric``."""
    resample: ClassVar[str | None] = None
    """``"module:function"``: ``function(arrays, metrics, *, resamples, seed) -> {metric: draws} | None``, the
    bootstrap of a matchup's ``metrics`` from its saved arrays (None: they cannot be recomputed from them)."""

    supplies_reference: ClassVar[bool] = False
    """True for a game that hands a defense declaring ``needs_reference`` its reference set (records outside the
    training set and the challenge) when it trains the release, and binds one to the attacker's ``train``."""

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
    def defense_problems(cls, spec: GameSpec, dataset: Dataset, arch: Any, defense: Any) -> list[tuple[str, str]]:
        """(field of the defense's entry, message) for every way the configuration ``defense`` cannot play ``spec``
        on ``dataset`` with the track's model ``arch``, checked when the scenario is validated. Default: a defense
        that hands over a model trained elsewhere (``trained_elsewhere``, which the membership game plays) cannot, nor
        can a defense that ``needs_reference`` play a game that does not ``supply_reference``."""
        if callable(getattr(defense, "trained_elsewhere", None)):
            return [("name", f"defense {getattr(defense, 'name', '?')!r} releases a model trained elsewhere, which "
                             f"the {cls.name!r} game does not play")]
        if getattr(defense, "needs_reference", False) and not cls.supplies_reference:
            return [("name", f"defense {getattr(defense, 'name', '?')!r} needs a reference set (population records "
                             f"outside its training set), which the {cls.name!r} game does not supply; play it in "
                             "the 'membership' game")]
        return []

    @classmethod
    def train_size(cls, spec: GameSpec) -> int:
        """Size of each released model's training set (DP defenses check δ < 1/n against it)."""
        raise NotImplementedError

    @abc.abstractmethod
    def release(self, procedure: Procedure) -> Release:
        """Train the released model(s) through ``procedure`` and measure their utility."""

    @abc.abstractmethod
    def view(self, attack: Attack, release: Release, procedure: Procedure) -> _AnyView:
        """Exactly what ``attack`` may see of ``release`` (never the secret)."""

    @abc.abstractmethod
    def score(self, attack: Attack, guess: Any) -> Outcome:
        """Check ``attack``'s guess and score it against the secret."""

    def view_groups(self, attack: Attack, release: Release, procedure: Procedure) -> list[list[_AnyView]]:
        """Every view one matchup plays, in groups: the arena answers each group with an attack process of its own,
        started after the previous group's has ended, so that nothing the attack learns from one group's views
        (another target's model, the shadows it was given) reaches another group. Default: one group holding
        ``view``. A game that plays many target models per matchup (the membership game's vulnerable-record
        protocol) groups them so that no process ever holds a target together with what reveals its secret."""
        return [[self.view(attack, release, procedure)]]

    def score_all(self, attack: Attack, guesses: list[Any]) -> Outcome:
        """Score the guesses of every view of ``view_groups``, in their order. Default: ``score`` of the one guess."""
        if len(guesses) != 1:
            raise ValueError(f"{type(self).__name__} plays one view a matchup, got {len(guesses)} guesses")
        return self.score(attack, guesses[0])

    def play(self, attack: Attack, release: Release, procedure: Procedure,
             run: Callable[[list[_AnyView]], list[Any]] | None = None) -> Outcome:
        """Build the attack's views, run each group (``run(views) -> guesses``; default: in this process), score
        the guesses against the secret."""
        answer = run or (lambda views: [attack.run(v) for v in views])
        guesses = [g for group in self.view_groups(attack, release, procedure) for g in answer(group)]
        return self.score_all(attack, guesses)

    @classmethod
    def rank_metric_of(cls, spec: GameSpec) -> str | None:
        """The ranking metric of a track playing ``spec`` when the scenario names none (default: ``rank_metric``);
        a game whose protocol changes with its parameters may rank by another metric for some of them."""
        return cls.rank_metric

    def save_artifacts(self, outcome: Outcome, directory: Path) -> None:  # noqa: B027 - by default, none
        """Write files that illustrate ``outcome`` (e.g. pictures) into ``directory``; default: none."""
