"""The attack contract: a threat model (what it may see) and ``run``, which turns a view into a guess."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel

from arena.contracts.params import NoParams

if TYPE_CHECKING:
    from arena.contracts.spec import Track

Capability = Literal["query", "labels", "parameters", "population", "training", "fixed-set", "prior"]
"""What a view may grant: ``query`` output probabilities and losses, ``labels`` predicted labels only (the
label-only threat model), ``parameters`` the weights, ``population`` data from the same distribution,
``training`` the target's training procedure as a callable, ``fixed-set`` and ``prior`` (reconstruction) D⁻ and
the prior over targets."""


class Attack(abc.ABC):
    """Base class of attack plugins; one instance holds one validated configuration.

    Class attributes an attack declares: ``name``; ``game``, the name of the game it plays (required: there is no
    default game); ``threat_model``, the capabilities it asks for (only the items they grant are in its view);
    ``Params``, the pydantic model of its parameters; ``version``, recorded with its results; ``adapts_to``, the
    names of the defenses it is an adaptive attack against (Aerni, Zhang & Tramèr 2024: designed for that defense,
    its shadows trained with it, on a signal it does not mask), so that a board can rank each defense by its worst
    adaptive attack; empty (the default) for an attack designed against no defense in particular.
    """

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    game: ClassVar[str]
    threat_model: ClassVar[frozenset[Capability]] = frozenset({"query"})
    Params: ClassVar[type[BaseModel]] = NoParams
    adapts_to: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, params: BaseModel) -> None:
        self.params = params

    def skip_reason(self, track: Track) -> str | None:
        """Why this attack does not apply to ``track`` (the matchup is then ``skipped``), or None."""
        return None

    @abc.abstractmethod
    def run(self, view) -> Any:  # noqa: ANN001 - game-specific view
        """Turn ``view`` (what the attack's threat model grants of the release) into the game's guess."""
