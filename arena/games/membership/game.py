"""The membership game: members vs non-members of the released model's training set, one score per point."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import torch
from pydantic import ConfigDict, PositiveInt

from arena.contracts.attack import Attack
from arena.contracts.game import Game, Outcome
from arena.contracts.release import BlackBox, LabelOnly, Models, Release
from arena.contracts.spec import GameSpec
from arena.contracts.view import Grant, View
from arena.engine.seeds import derive_seed, permutation
from arena.games.membership.guess import MembershipGuess
from arena.games.membership.metrics import METRICS, membership_metrics
from arena.pipeline.procedure import TrainingProcedure


class MembershipGameSpec(GameSpec):
    """Members and as many non-members are the challenge; population and test are disjoint from both."""

    model_config = ConfigDict(extra="forbid")
    name: Literal["membership"]
    members: PositiveInt
    test: PositiveInt = 400
    population: PositiveInt | None = None
    stratify: bool = True

    def required_points(self) -> int:
        return 2 * self.members + self.test + (self.population or 1)


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


class MembershipGame(Game):
    """Per seed: members, as many non-members, the attacker's population and a test set, all disjoint.

    With ``stratify`` (the default) members and non-members have the same label counts (to within one
    per label). Otherwise, on small sets, the training set's label histogram, which a DP model may learn
    as an aggregate, tells members from non-members by itself.
    """

    name = "membership"
    Spec = MembershipGameSpec
    View = MembershipView
    Guess = MembershipGuess
    metrics = METRICS
    template_dir = Path(__file__).parent / "templates"
    audit_rule = "arena.games.membership.rule:audit_game"
    audit_view = "arena.games.membership.sections:audit_section"
    report_view = "arena.games.membership.sections:section"
    primary_metric = "auc"
    rank_metric = "tpr@1%fpr"  # Carlini et al. 2022: TPR at low FPR first, AUC beside it
    resample = "arena.games.membership.metrics:resample"
    spec: MembershipGameSpec

    def __init__(self, spec: MembershipGameSpec, dataset, seed: int) -> None:  # noqa: ANN001
        super().__init__(spec, dataset, seed)
        order = permutation(dataset.n, "membership-split", seed)
        m, t = spec.members, spec.test
        pairs = order[: 2 * m]
        if spec.stratify:  # label-sorted (random within a label), then dealt alternately: equal label counts
            pairs = pairs[np.argsort(dataset.y[pairs], kind="stable")]
        self.members, self.nonmembers = pairs[0::2], pairs[1::2]
        self.test = order[2 * m : 2 * m + t]
        rest = order[2 * m + t :]
        self.population = rest[: spec.population] if spec.population else rest
        challenge = np.concatenate([self.members, self.nonmembers])
        shuffle = permutation(len(challenge), "membership-challenge", seed)
        self.challenge = challenge[shuffle]
        self._is_member = shuffle < m

    @classmethod
    def train_size(cls, spec: MembershipGameSpec) -> int:
        return spec.members

    def release(self, procedure: TrainingProcedure) -> Release:
        X, y = self.records(self.members)
        models, claim = procedure(
            X[None], y[None], [derive_seed(self.seed, "release-init")], [derive_seed(self.seed, "release-train")]
        )
        Xt, yt = self.records(self.test)
        return Release(models=models, utility=float(models.accuracy(Xt, yt)[0]), claim=claim)

    def view(self, attack: Attack, release: Release, procedure: TrainingProcedure) -> MembershipView:
        """What ``attack`` may see: the challenge records (features and class labels, never membership) and the
        shape of one record (``input_shape``, e.g. (1, 8, 8) for an image, (d,) for a table row)."""
        cX, cy = self.records(self.challenge)
        pX, py = self.records(self.population)
        return MembershipView(attack.name, attack.threat_model, {
            "challenge_X": cX,
            "challenge_y": cy,
            "n_classes": self.dataset.n_classes,
            "input_shape": self.dataset.shape,
            "train_size": self.spec.members,
            "seed": derive_seed(self.seed, "attack", attack.name),
            "pool_seed": derive_seed(self.seed, "shadow-pool"),
            "model": BlackBox(release.models),
            "labels_model": LabelOnly(release.models),
            "parameters": release.models,
            "population_X": pX,
            "population_y": py,
            "train": procedure,
        })

    def score(self, attack: Attack, guess: Any) -> Outcome:
        """The guess's metrics against the secret membership, and the arrays the audit and the report read."""
        if not isinstance(guess, MembershipGuess):
            raise TypeError(f"attack {attack.name!r} returned {type(guess).__name__}, not a MembershipGuess")
        scores = np.asarray(guess.scores, dtype=np.float64).reshape(-1)
        decisions = np.asarray(guess.decisions).reshape(-1)
        if len(scores) != len(self.challenge) or len(decisions) != len(self.challenge):
            raise ValueError(
                f"attack {attack.name!r} returned {len(scores)} scores for {len(self.challenge)} challenge points"
            )
        metrics, notes = membership_metrics(scores, self._is_member, decisions)
        # ``record``: each challenge point's row in the dataset, so that a record's score and rank can be followed
        # across seeds (per-record risk); ``label``: its class, for per-class rates without reloading the data.
        arrays = {
            "scores": scores,
            "is_member": self._is_member.astype(np.int8),
            "record": self.challenge.astype(np.int64),
            "label": np.asarray(self.dataset.y[self.challenge]).astype(np.int64),
        }
        return Outcome(metrics, notes, arrays)
