"""The membership game: members vs non-members of the released model's training set, one score per point."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
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

    def required_points(self) -> int:
        return 2 * self.members + self.test + (self.population or 1) + (self.reference or 0)

    def reference_size(self, n_records: int) -> int:
        """Records of the defender's reference set on a dataset of ``n_records`` (0: none to give)."""
        if self.reference:
            return self.reference
        left = n_records - 2 * self.members - self.test - (self.population or n_records)
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


class MembershipGame(Game):
    """Per seed: members, as many non-members, the attacker's population and a test set, all disjoint.

    With ``stratify`` (the default) members and non-members have the same label counts (to within one
    per label). Otherwise, on small sets, the training set's label histogram, which a DP model may learn
    as an aggregate, tells members from non-members by itself.

    A defense whose release was trained elsewhere (``TrainedElsewhere``) fixes the split instead: its members,
    ``members`` of its non-members drawn per seed, and the test set and population from the records in neither
    list; the attacker's shadow models then train with the defense it names for them.

    A defense that ``needs_reference`` is given the game's reference set (``reference``: records in none of the
    challenge, the test set and the population) with the members when the release trains; the attacker's
    ``train`` is bound to the attacker's own population as its shadows' reference set (kept in the arena's
    process: a sandboxed attack never receives it).
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
    supplies_reference = True
    spec: MembershipGameSpec

    def __init__(self, spec: MembershipGameSpec, dataset, seed: int) -> None:  # noqa: ANN001
        super().__init__(spec, dataset, seed)
        self._order = order = permutation(dataset.n, "membership-split", seed)
        m = spec.members
        pairs = order[: 2 * m]
        if spec.stratify:  # label-sorted (random within a label), then dealt alternately: equal label counts
            pairs = pairs[np.argsort(dataset.y[pairs], kind="stable")]
        self._deal(pairs[0::2], pairs[1::2])
        # member i and non-member i were dealt from one pair, so which of the two trains is a fair coin, independent
        # across pairs: exactly one record of each swaps, the experiment the paired one-run bound reads
        self._paired = True
        self._shadows: Any = None

    def _deal(self, members: np.ndarray, nonmembers: np.ndarray) -> None:
        """The challenge (members and non-members, shuffled) and, from the other records in the split's order,
        the test set, the population and the defender's reference set."""
        m, t = len(members), self.spec.test
        self.members, self.nonmembers = members, nonmembers
        taken = np.zeros(self.dataset.n, dtype=bool)
        taken[members] = taken[nonmembers] = True
        rest = self._order[~taken[self._order]]
        self.test = rest[:t]
        tail = rest[t:]
        r = self.spec.reference or 0
        self.population = tail[: self.spec.population] if self.spec.population else tail[: len(tail) - r]
        self.reference = tail[len(self.population):][: r or m]
        challenge = np.concatenate([members, nonmembers])
        shuffle = permutation(len(challenge), "membership-challenge", self.seed)
        self.challenge = challenge[shuffle]
        self._shuffle = shuffle
        self._is_member = shuffle < m

    def _trained_elsewhere(self, procedure: TrainingProcedure) -> Release | None:
        """The release of a defense that hands over a model trained elsewhere (``TrainedElsewhere``), with the
        split it fixes dealt; None for a defense that trains its release here."""
        hand_over = getattr(procedure.defense, "trained_elsewhere", None)
        if not callable(hand_over):
            return None
        given: TrainedElsewhere = hand_over(self.dataset, procedure.arch)
        members, nonmembers = np.asarray(given.members, np.int64), np.asarray(given.nonmembers, np.int64)
        m = self.spec.members
        if len(members) != m or len(nonmembers) < m:
            raise ValueError(f"a model trained elsewhere on {len(members)} members with {len(nonmembers)} "
                             f"non-members cannot play a game of members: {m} (it needs exactly {m} members and "
                             f"at least as many non-members)")
        drawn = np.sort(nonmembers[permutation(len(nonmembers), "membership-given-nonmembers", self.seed)[:m]])
        self._deal(np.sort(members), drawn)
        self._paired = False  # the members were fixed outside the game: no coin decided which of a pair trained
        self._shadows = dataclasses.replace(procedure, defense=given.shadows)
        template = procedure.arch.template()
        names = (*template.trainable, *template.buffers)
        missing = [k for k in names if k not in given.state]
        if missing:
            raise ValueError(f"the model trained elsewhere lacks {', '.join(missing)} of the track's model")
        state = {k: given.state[k].detach().to("cpu", torch.float32)[None] for k in names}
        models = Models(procedure.arch, state)
        Xt, yt = self.records(self.test)
        return Release(models=models, utility=float(models.accuracy(Xt, yt)[0]), claim=None)

    @classmethod
    def train_size(cls, spec: MembershipGameSpec) -> int:  # type: ignore[override]  # narrowed to the game's Spec
        return spec.members

    @classmethod
    def defense_problems(cls, spec: GameSpec, dataset: Any, arch: Any, defense: Any) -> list[tuple[str, str]]:
        """A model trained elsewhere must fit the track's dataset and model: its ``trained_elsewhere`` raises
        ``ValueError('field: message')`` otherwise. A defense that ``needs_reference`` needs records left for it."""
        if (getattr(defense, "needs_reference", False) and isinstance(spec, MembershipGameSpec)
                and spec.reference_size(dataset.n) < 1):
            return [("", f"defense {getattr(defense, 'name', '?')!r} needs a reference set, and game {spec.name!r} "
                         f"leaves no record of dataset {dataset.name!r} ({dataset.n} records) outside the challenge, "
                         "the test set and the population: set game.reference (records given to the defender), "
                         "or a game.population that leaves records over")]
        hand_over = getattr(defense, "trained_elsewhere", None)
        if not callable(hand_over):
            return []
        try:
            hand_over(dataset, arch)
        except ValueError as exc:
            field, _, message = str(exc).partition(": ")
            return [(field, message) if message and field.isidentifier() else ("", str(exc))]
        return []

    def release(self, procedure: TrainingProcedure) -> Release:  # type: ignore[override]  # narrowed to TrainingProcedure
        given = self._trained_elsewhere(procedure)
        if given is not None:
            return given
        X, y = self.records(self.members)
        reference = {}
        if procedure.defense.needs_reference:  # every member trains; the reference set is outside the challenge
            Xr, yr = self.records(self.reference)
            reference = {"reference_X": Xr, "reference_y": yr}
        models, claim = procedure(
            X[None], y[None], [derive_seed(self.seed, "release-init")], [derive_seed(self.seed, "release-train")],
            **reference,
        )
        Xt, yt = self.records(self.test)
        return Release(models=models, utility=float(models.accuracy(Xt, yt)[0]), claim=claim)

    def view(  # type: ignore[override]  # narrowed to TrainingProcedure
        self, attack: Attack, release: Release, procedure: TrainingProcedure
    ) -> MembershipView:
        """What ``attack`` may see: the challenge records (features and class labels, never membership) and the
        shape of one record (``input_shape``, e.g. (1, 8, 8) for an image, (d,) for a table row)."""
        cX, cy = self.records(self.challenge)
        pX, py = self.records(self.population)
        train = procedure if self._shadows is None else self._shadows
        if train.defense.needs_reference:  # the attacker's shadows: its own population is their reference set
            train = dataclasses.replace(train, reference_X=pX, reference_y=py)
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
            "train": train,
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
        out = scores[~self._is_member]
        ties = int(np.sum(out == out.max()))
        metrics["top_ties"] = ties  # non-members sharing the top non-member score: no TPR below ties/n at lower FPR
        if ties > 1:
            notes.append(f"{ties} non-members share the top non-member score: below FPR {ties / len(out):.2%} the "
                         "attack's TPR is 0 by construction")
        if guess.references is not None:
            metrics["reference_points"] = int(guess.references)
        # ``record``: each challenge point's row in the dataset, so that a record's score and rank can be followed
        # across seeds (per-record risk); ``label``: its class, for per-class rates without reloading the data.
        arrays = {
            "scores": scores,
            "is_member": self._is_member.astype(np.int8),
            "record": self.challenge.astype(np.int64),
            "label": np.asarray(self.dataset.y[self.challenge]).astype(np.int64),
        }
        if self._paired:
            arrays["pair"] = self.pairs()
        return Outcome(metrics, notes, arrays)

    def pairs(self) -> np.ndarray:
        """[2m] each challenge point's pair id (member i and non-member i share id i), −1 for the points of a pair
        whose two records have different labels (dropped: the paired audit swaps records of one label)."""
        m = len(self.members)
        ids = np.r_[np.arange(m), np.arange(m)]
        y = np.asarray(self.dataset.y)
        same = y[self.members] == y[self.nonmembers]
        ids = np.where(np.r_[same, same], ids, -1)
        return ids[self._shuffle].astype(np.int64)  # the challenge is [members, non-members][shuffle]
