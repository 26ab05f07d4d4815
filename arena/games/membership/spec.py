"""The membership game's spec (``game:`` in a scenario), the view an attack gets, and a release trained
elsewhere."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
import torch
from pydantic import ConfigDict, Field, PositiveInt, field_validator, model_validator

from arena.contracts.release import BlackBox, LabelOnly, Models
from arena.contracts.spec import GameSpec
from arena.contracts.view import Grant, View
from arena.games.membership.vulnerable import CanarySpec
from arena.pipeline.procedure import TrainingProcedure


class MembershipGameSpec(GameSpec):
    """Members and as many non-members are the challenge; population and test are disjoint from both.

    ``reference``: records given to a defense that needs a reference set (``Defense.needs_reference``: adv-reg,
    dmp, mixup-mmd, early-stopping, memguard), disjoint from the challenge, the test set and the attacker's
    population. Default: the records left after the population (when ``population`` is set), at most ``members``
    of them; set, they are taken after the population (with ``population`` unset, the population is the rest)."""

    model_config = ConfigDict(extra="forbid")
    name: Literal["membership"]
    members: PositiveInt
    test: PositiveInt = 400
    population: PositiveInt | None = None
    reference: PositiveInt | None = None
    stratify: bool = True
    targets: PositiveInt = Field(default=1, description="target models per defense configuration and seed; more "
                                 "than 1 (a multiple of 4) plays the vulnerable-record protocol (Aerni et al. 2024)")
    canaries: CanarySpec | None = Field(default=None, description="the canaries of the vulnerable-record protocol "
                                        "(default with targets > 1: 256 mislabelled records)")

    @field_validator("targets")
    @classmethod
    def _targets(cls, v: int) -> int:
        if v > 1 and v % 4:
            raise ValueError(f"must be 1 or a multiple of 4 (two halves of complementary pairs), got {v}")
        return v

    @model_validator(mode="after")
    def _protocol(self) -> MembershipGameSpec:
        if self.canaries is not None and self.targets == 1:
            raise ValueError("canaries need the vulnerable-record protocol: set targets > 1 (e.g. targets: 32)")
        return self

    @property
    def vulnerable(self) -> bool:
        """Whether the track plays the vulnerable-record protocol (many targets, canaries)."""
        return self.targets > 1

    @property
    def canary_spec(self) -> CanarySpec | None:
        """The canaries played: those given, the default ones under the vulnerable-record protocol, else None."""
        return self.canaries or (CanarySpec() if self.vulnerable else None)

    def required_points(self) -> int:
        return self._challenge_records() + self.test + (self.population or 1) + (self.reference or 0)

    def _challenge_records(self) -> int:
        """Dataset records the challenge takes: 2·members, and the canaries drawn from the dataset."""
        return 2 * self.members + (self.canary_spec.rows_needed() if self.canary_spec is not None else 0)

    def reference_size(self, n_records: int) -> int:
        """Records of the defender's reference set on a dataset of ``n_records`` (0: none to give)."""
        if self.reference:
            return self.reference
        left = n_records - self._challenge_records() - self.test - (self.population or n_records)
        return max(0, min(self.members, left))


class MembershipView(View):
    """What a membership attack is given (items of capabilities it did not declare raise ``ThreatModelError``)."""

    challenge_X: torch.Tensor
    """the challenge records' features [2m, *input_shape]; which of them are members is never shown"""
    challenge_y: torch.Tensor
    n_classes: int
    input_shape: tuple[int, ...]
    train_size: int
    seed: int
    pool_seed: int
    """the game's attack-independent seed for shadow pools (shared pools train once per run)"""
    model: Annotated[BlackBox, Grant("query")]
    labels_model: Annotated[LabelOnly, Grant("labels")]
    parameters: Annotated[Models, Grant("parameters")]
    population_X: Annotated[torch.Tensor, Grant("population")]
    population_y: Annotated[torch.Tensor, Grant("population")]
    train: Annotated[TrainingProcedure, Grant("training")]
    shadow_models: Annotated[Models | None, Grant("training")]
    """under the vulnerable-record protocol, other target models trained with the defense itself on random halves
    of this challenge (complementary pairs), which ``arena.train_pool`` hands over as the pool; else None"""
    shadow_in: Annotated[np.ndarray | None, Grant("training")]
    """[K, n_challenge]: where each of ``shadow_models`` trained on challenge point j; else None"""


@dataclass(frozen=True)
class TrainedElsewhere:
    """A release its defense did not train: a model trained outside the arena on records of the track's dataset,
    which a defense hands the membership game through ``trained_elsewhere(dataset, arch) -> TrainedElsewhere``
    (the built-in ``checkpoint`` defense does).

    ``members``: the dataset rows it trained on, exactly the game's ``members`` of them; ``nonmembers``: rows it
    never saw, at least as many; ``state``: its parameters and buffers by the track model's module names (one
    model, no leading axis); ``shadows``: the defense an attacker's shadow models train with, on the track's
    recipe (what ``view.train`` trains: the release's own secret is never in it)."""

    members: np.ndarray
    nonmembers: np.ndarray
    state: dict[str, torch.Tensor]
    shadows: Any
