"""A game plugin: attribute inference (Yeom et al. 2018, Fredrikson et al. 2015).

The challenger trains the released model on its members. It then picks target records, half of them members and
half not, blanks one column of each (the sensitive attribute, a column with few distinct values) and asks the
attacker to tell each target's value from the rest of the record, its label and the model. Guessing the value
of a non-member measures what the model knows about the population (imputation); the gap between members and
non-members is what the model leaks about its own training records, the game's primary metric.

Scenario files name it ``game: {name: example-attribute, members: 200, targets: 100, column: -1}``. The game
also registers a baseline attack, ``example-attribute-prior``, which ignores the model: its advantage is the
noise floor any real attack must rise above.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
import torch
from pydantic import ConfigDict, Field, PositiveInt, ValidationInfo, field_validator

from arena import (
    Attack,
    BlackBox,
    Dataset,
    Game,
    GameSpec,
    Grant,
    Metric,
    Outcome,
    Release,
    TrainingProcedure,
    View,
    derive_seed,
    hookimpl,
)

GAME = "example-attribute"


class AttributeSpec(GameSpec):
    """The game's part of a track (``game:``); unknown keys are errors at ``tracks[i].game.<field>``."""

    model_config = ConfigDict(extra="forbid")
    name: Literal["example-attribute"]
    members: PositiveInt = Field(description="training set of the released model")
    targets: PositiveInt = Field(default=100, description="member targets, and as many non-member targets")
    test: PositiveInt = Field(default=200, description="held-out records the release's utility is measured on")
    population: PositiveInt = Field(default=200, description="records the attacker may see whole ('population')")
    column: int = Field(default=-1, description="the sensitive attribute's column (negative: from the end)")
    max_values: int = Field(default=16, ge=2, le=256, description="most distinct values the column may take")

    @field_validator("targets")
    @classmethod
    def _targets_are_members(cls, targets: int, info: ValidationInfo) -> int:
        members = info.data.get("members")  # validated first: declared above
        if members is not None and targets > members:
            raise ValueError(f"{targets} member targets but only {members} members")
        return targets

    def required_points(self) -> int:
        return self.members + self.targets + self.test + self.population


class AttributeView(View):
    """What an attack of this game sees. Items without a ``Grant`` go to every attack; the others only to an
    attack whose threat model declares the capability (asking for one otherwise raises ``ThreatModelError``)."""

    targets_X: torch.Tensor
    """the targets' records [2t, d], the attribute's column blanked (0); which are members is never shown"""
    targets_y: torch.Tensor
    """their labels [2t]"""
    column: int
    """the blanked column (non-negative)"""
    candidates: torch.Tensor
    """the values the attribute takes in the data set, sorted [L]; a guess is an index into it"""
    n_classes: int
    seed: int
    model: Annotated[BlackBox, Grant("query")]
    population_X: Annotated[torch.Tensor, Grant("population")]
    """records [p, d] from the same distribution, attribute included, none of them a target or a member"""
    population_y: Annotated[torch.Tensor, Grant("population")]


@dataclass(frozen=True)
class AttributeGuess:
    """One index into ``view.candidates`` per target (numbers only: a guess crosses a process boundary)."""

    choice: np.ndarray


METRICS = (
    Metric("attribute_accuracy", GAME, True, "share of member targets whose attribute was guessed", (0.0, 1.0)),
    Metric("attribute_accuracy_nonmembers", GAME, True, "the same on non-member targets (what imputation gets)",
           (0.0, 1.0)),
    Metric("attribute_advantage", GAME, True, "accuracy on members minus accuracy on non-members: what the "
           "model leaks about its training records", (-1.0, 1.0)),
)


def resample_targets(arrays: Mapping[str, Any], metrics: Sequence[str], *, resamples: int,
                     seed: int) -> dict[str, np.ndarray] | None:
    """The game's ``resample``: bootstrap draws of its metrics from one matchup's saved arrays, member and
    non-member targets each drawn with replacement (so every draw keeps the counts of the game played)."""
    if "correct" not in arrays or "is_member" not in arrays:
        return None
    correct = np.asarray(arrays["correct"]).astype(bool)
    member = np.asarray(arrays["is_member"]).astype(bool)
    inside, outside = correct[member], correct[~member]
    if not len(inside) or not len(outside):
        return None
    rng = np.random.default_rng(seed)
    on_members = inside[rng.integers(0, len(inside), (resamples, len(inside)))].mean(axis=1)
    on_others = outside[rng.integers(0, len(outside), (resamples, len(outside)))].mean(axis=1)
    draws = {"attribute_accuracy": on_members, "attribute_accuracy_nonmembers": on_others,
             "attribute_advantage": on_members - on_others}
    return {name: values for name, values in draws.items() if name in metrics}


class AttributeGame(Game):
    """Per seed, disjoint: members (the first ``targets`` of them are the member targets), non-member targets,
    a test set and the attacker's population."""

    name = GAME
    version = "1"
    Spec = AttributeSpec
    View = AttributeView
    Guess = AttributeGuess
    metrics = METRICS
    primary_metric = "attribute_advantage"
    rank_metric = None  # rank by the primary metric
    resample = "arena_example_game:resample_targets"  # the leaderboard's bootstrap intervals (imported on use)
    audit_rule = audit_view = report_view = None  # no DP audit, no report section of its own
    spec: AttributeSpec

    def __init__(self, spec: AttributeSpec, dataset: Dataset, seed: int) -> None:
        super().__init__(spec, dataset, seed)
        order = np.random.default_rng(derive_seed(seed, GAME, "split")).permutation(dataset.n)
        m, t, n_test, p = spec.members, spec.targets, spec.test, spec.population
        self.members = order[:m]
        outsiders = order[m : m + t]
        self.test = order[m + t : m + t + n_test]
        self.population = order[m + t + n_test : m + t + n_test + p]
        targets = np.concatenate([self.members[:t], outsiders])
        shuffle = np.random.default_rng(derive_seed(seed, GAME, "targets")).permutation(2 * t)
        self.targets = targets[shuffle]
        self._is_member = shuffle < t
        self.column = spec.column % dataset.n_features
        values = dataset.X[:, self.column]
        self.candidates = np.unique(values)
        self._secret = np.searchsorted(self.candidates, values[self.targets])  # the index of each target's value

    @classmethod
    def problems(cls, spec: AttributeSpec, dataset: Dataset) -> list[tuple[str, str]]:
        found = super().problems(spec, dataset)
        if not -dataset.n_features <= spec.column < dataset.n_features:
            return [*found, ("column", f"{spec.column} is out of range: {dataset.name!r} has "
                                       f"{dataset.n_features} columns")]
        distinct = len(np.unique(dataset.X[:, spec.column]))
        if distinct > spec.max_values:
            found.append(("column", f"column {spec.column} of {dataset.name!r} takes {distinct} distinct values, "
                                    f"more than max_values = {spec.max_values}: pick a categorical column"))
        return found

    @classmethod
    def train_size(cls, spec: AttributeSpec) -> int:
        return spec.members

    def release(self, procedure: TrainingProcedure) -> Release:
        X, y = self.records(self.members)
        models, claim = procedure(X[None], y[None], [derive_seed(self.seed, GAME, "init")],
                                  [derive_seed(self.seed, GAME, "train")])
        Xt, yt = self.records(self.test)
        return Release(models=models, utility=float(models.accuracy(Xt, yt)[0]), claim=claim)

    def view(self, attack: Attack, release: Release, procedure: TrainingProcedure) -> AttributeView:
        tX, ty = self.records(self.targets)
        tX = tX.clone()
        tX[:, self.column] = 0.0  # the secret attribute, blanked
        pX, py = self.records(self.population)
        return AttributeView(attack.name, attack.threat_model, {
            "targets_X": tX,
            "targets_y": ty,
            "column": self.column,
            "candidates": torch.from_numpy(self.candidates),
            "n_classes": self.dataset.n_classes,
            "seed": derive_seed(self.seed, GAME, "attack", attack.name),
            "model": BlackBox(release.models),
            "population_X": pX,
            "population_y": py,
        })

    def score(self, attack: Attack, guess: Any) -> Outcome:
        if not isinstance(guess, AttributeGuess):
            raise TypeError(f"attack {attack.name!r} returned {type(guess).__name__}, not an AttributeGuess")
        choice = np.asarray(guess.choice).reshape(-1)
        if len(choice) != len(self.targets):
            raise ValueError(f"attack {attack.name!r} guessed {len(choice)} values for {len(self.targets)} targets")
        if not np.issubdtype(choice.dtype, np.integer) or choice.min() < 0 or choice.max() >= len(self.candidates):
            raise ValueError(f"attack {attack.name!r}: a guess is an index into view.candidates "
                             f"(integers in [0, {len(self.candidates)}))")
        correct = choice == self._secret
        on_members, on_others = float(correct[self._is_member].mean()), float(correct[~self._is_member].mean())
        metrics = {
            "attribute_accuracy": on_members,
            "attribute_accuracy_nonmembers": on_others,
            "attribute_advantage": on_members - on_others,
            "n_members": int(self._is_member.sum()),
            "n_nonmembers": int((~self._is_member).sum()),
            "n_values": len(self.candidates),
        }
        arrays = {"correct": correct.astype(np.int8), "is_member": self._is_member.astype(np.int8),
                  "record": self.targets.astype(np.int64)}
        return Outcome(metrics, [], arrays)


class PriorBaseline(Attack):
    """Guess, for every target, the attribute value most common among population records of its class: what a
    record's label alone tells. It never queries the model, so its advantage is noise around zero."""

    name = "example-attribute-prior"
    version = "1"
    game = GAME
    threat_model = frozenset({"population"})

    def run(self, view: AttributeView) -> AttributeGuess:
        L = len(view.candidates)
        value = torch.searchsorted(view.candidates, view.population_X[:, view.column].contiguous())
        counts = torch.zeros(view.n_classes, L, dtype=torch.int64)
        counts.index_put_((view.population_y, value.clamp_max(L - 1)), torch.ones_like(value), accumulate=True)
        # the class's own counts decide; the overall counts break ties (and speak for a class with no record)
        ranked = counts * (len(value) + 1) + counts.sum(0)
        return AttributeGuess(choice=ranked.argmax(1)[view.targets_y].numpy())


@hookimpl
def register_games(register) -> None:  # noqa: ANN001 - the registry's callback
    register(AttributeGame)


@hookimpl
def register_attacks(register) -> None:  # noqa: ANN001
    register(PriorBaseline)
