"""The language game's spec (``game: {name: language}``) and the view its attacks get."""

from __future__ import annotations

from typing import Annotated, Literal

import torch
from pydantic import ConfigDict, Field, model_validator

from arena.contracts.release import Models
from arena.contracts.view import Grant, View
from arena.games.language.exposure import CanarySpec
from arena.games.language.query import TextBlackBox
from arena.games.membership.spec import MembershipGameSpec
from arena.pipeline.procedure import TrainingProcedure


class LanguageGameSpec(MembershipGameSpec):
    """Members and as many non-members drawn at random from every record of the text dataset (the challenger's
    split: members and non-members come from one distribution by construction), a held-out test set for utility
    and the attacker's population; optionally the secret sharer's canaries, inserted into the training set.

    ``split: by-source`` (members from the dataset's first source, non-members from its second, as many published
    LLM membership results were measured) is refused when the scenario is validated: such a split measures the
    shift between the sources, not membership."""

    model_config = ConfigDict(extra="forbid")
    name: Literal["language"]  # type: ignore[assignment]  # narrowed from the membership game's name
    split: Literal["random", "by-source"] = Field(default="random", description="random (the challenger's draw); "
                                                  "by-source is refused: it measures a distribution shift")
    exposure: CanarySpec | None = Field(default=None, description="the secret sharer's canaries (none by default)")

    @model_validator(mode="after")
    def _one_target(self) -> LanguageGameSpec:
        if self.targets != 1 or self.canaries is not None:
            raise ValueError("the language game plays one target (targets: 1); its canaries are 'exposure'")
        return self


class LanguageView(View):
    """What a text attack is given: the challenge records (token ids), the tokenizer that made them (part of the
    released model), query access, and, as declared, the population, the training procedure and the weights."""

    challenge_X: torch.Tensor
    """the challenge records' token ids [2m, L] (float, PAD-padded); which are members is never shown"""
    challenge_y: torch.Tensor
    """zeros [2m] (a text record has no label); what the shared shadow pools index alongside the records"""
    tokenizer: str
    """the ``tokenizers`` JSON of the ids (to decode a record, or re-encode it lowercased)"""
    n_classes: int
    """the vocabulary's size"""
    input_shape: tuple[int, ...]
    train_size: int
    seed: int
    pool_seed: int
    model: Annotated[TextBlackBox, Grant("query")]
    parameters: Annotated[Models, Grant("parameters")]
    population_X: Annotated[torch.Tensor, Grant("population")]
    population_y: Annotated[torch.Tensor, Grant("population")]
    train: Annotated[TrainingProcedure, Grant("training")]
