"""The attack contract: a threat model (what it may see) and ``run``, which turns a view into a guess."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np
from pydantic import BaseModel

from arena.data import NoParams

if TYPE_CHECKING:
    from arena.scenario import Track

Capability = Literal["query", "labels", "parameters", "population", "training", "fixed-set", "prior"]
"""What a view may grant: ``query`` output probabilities and losses, ``labels`` predicted labels only (the
label-only threat model), ``parameters`` the weights, ``population`` data from the same distribution,
``training`` the target's training procedure as a callable, ``fixed-set`` and ``prior`` (reconstruction) D⁻ and
the prior over targets."""


@dataclass(frozen=True)
class MembershipGuess:
    """One score per challenge point (higher means member) and the attack's own hard decisions."""

    scores: np.ndarray
    decisions: np.ndarray


@dataclass(frozen=True)
class ReconstructionGuess:
    """One reconstructed record per target, and a label per target when the attack recovers labels."""

    records: np.ndarray
    labels: np.ndarray | None = None


class Attack:
    """Base class of attack plugins; one instance holds one validated configuration."""

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    game: ClassVar[str] = "membership"
    threat_model: ClassVar[frozenset[Capability]] = frozenset({"query"})
    Params: ClassVar[type[BaseModel]] = NoParams

    def __init__(self, params: BaseModel) -> None:
        self.params = params

    def skip_reason(self, track: Track) -> str | None:
        """Why this attack does not apply to ``track`` (the matchup is then ``skipped``), or None."""
        return None

    def run(self, view) -> MembershipGuess | ReconstructionGuess:  # noqa: ANN001 - game-specific view
        raise NotImplementedError
