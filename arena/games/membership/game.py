"""The membership game: members vs non-members of the released model's training set, one score per point."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arena.contracts.attack import Attack
from arena.contracts.game import Game, Outcome
from arena.contracts.release import BlackBox, LabelOnly, Models, Release
from arena.contracts.spec import GameSpec
from arena.engine.seeds import derive_seed, permutation
from arena.games.membership.guess import MembershipGuess
from arena.games.membership.metrics import METRICS, membership_scores
from arena.games.membership.spec import MembershipGameSpec, MembershipView, TrainedElsewhere
from arena.games.membership.vulnerable import (
    RANK_METRIC,
    VR_METRICS,
    Canaries,
    groups,
    make_canaries,
    plan_targets,
    screen_risk,
    vulnerable_metrics,
)
from arena.pipeline.procedure import TrainingProcedure
from arena.pipeline.store import content_key


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
    metrics = (*METRICS, *VR_METRICS)
    template_dir = Path(__file__).parent / "templates"
    audit_rule = "arena.games.membership.rule:audit_game"
    audit_view = "arena.games.membership.sections:audit_section"
    report_view = "arena.games.membership.sections:section"
    primary_metric = "auc"
    rank_metric = "tpr@1%fpr"  # Carlini et al. 2022: TPR at low FPR first, AUC beside it
    resample = "arena.games.membership.vulnerable:resample"
    supplies_reference = True
    spec: MembershipGameSpec

    def __init__(self, spec: MembershipGameSpec, dataset, seed: int) -> None:  # noqa: ANN001
        super().__init__(spec, dataset, seed)
        self._order = order = permutation(dataset.n, "membership-split", seed)
        self._shadows: Any = None
        if spec.vulnerable:
            self._vulnerable()
            return
        m = spec.members
        pairs = order[: 2 * m]
        if spec.stratify:  # label-sorted (random within a label), then dealt alternately: equal label counts
            pairs = pairs[np.argsort(dataset.y[pairs], kind="stable")]
        self._deal(pairs[0::2], pairs[1::2])
        # member i and non-member i were dealt from one pair, so which of the two trains is a fair coin, independent
        # across pairs: exactly one record of each swaps, the experiment the paired one-run bound reads
        self._paired = True

    def _vulnerable(self) -> None:
        """The vulnerable-record protocol's split (``arena.games.membership.vulnerable``): 2·members base challenge
        records, the canaries (or the candidates they are screened from), then the test set, the population and the
        reference set from the records left; the challenge is the base records and the canaries, shuffled; each
        target's membership of it is the plan's."""
        spec, m = self.spec, self.spec.members
        canary_spec = spec.canary_spec
        assert canary_spec is not None
        self._base = self._order[: 2 * m]
        used = 2 * m + canary_spec.rows_needed()
        self._candidates = self._order[2 * m : used]
        self._deal_rest(self._order[used:], m)
        plan = plan_targets(2 * m, canary_spec.count, spec.targets, self.seed)
        self._shuffle = permutation(2 * m + canary_spec.count, "membership-challenge", self.seed)
        self._is_canary = self._shuffle >= 2 * m
        self._is_in = plan.is_in[:, self._shuffle]
        self._plan = plan
        self._paired = False
        self._is_member = self._is_in[0]
        self.canaries: Canaries | None = None
        if canary_spec.kind != "vulnerable":
            self._insert(make_canaries(canary_spec, self.dataset, self._candidates, self.seed))

    def _insert(self, canaries: Canaries) -> None:
        """The challenge with ``canaries``: the base records and the canaries, shuffled."""
        self.canaries = canaries
        bX, by = self.records(self._base)
        self._challenge_X = torch.cat([bX, canaries.X])[self._shuffle]
        self._challenge_y = torch.cat([by, canaries.y])[self._shuffle]
        self._record = np.r_[self._base, canaries.rows][self._shuffle].astype(np.int64)
        self.challenge = self._record

    def _screen(self, procedure: TrainingProcedure) -> None:
        """``kind: vulnerable``: the ``count`` candidates a non-private screening pool of the track's model finds
        most exposed (``vulnerable.screen_risk`` over the base records and the candidates), cached in the run
        directory, so every defense configuration of a seed plays the same canaries."""
        if self.canaries is not None:
            return
        spec = self.spec.canary_spec
        assert spec is not None
        key = content_key({"screen": spec.screen.model_dump(), "dataset": self.dataset.name, "seed": self.seed,
                           "arch": procedure.arch.identity(), "candidates": self._candidates.tolist(),
                           "base": self._base.tolist()})
        cache = procedure.cache
        hit = cache.get("canaries", key) if cache is not None else None
        if hit is None:
            X, y = self.records(np.r_[self._base, self._candidates])
            risk = screen_risk(spec.screen, procedure.arch, X, y, derive_seed(self.seed, "screen"))
            top = np.sort(np.argsort(-risk[len(self._base):], kind="stable")[: spec.count])
            hit = {"rows": torch.from_numpy(self._candidates[top].astype(np.int64))}
            if cache is not None:
                cache.put("canaries", key, hit)
        self._insert(make_canaries(spec, self.dataset, hit["rows"].numpy(), self.seed))

    def _target_training_sets(self) -> tuple[torch.Tensor, torch.Tensor]:
        """[M, n, ...] and [M, n]: each target's training set, its base half then its canary half, each member
        canary ``copies`` times (the same size for every target)."""
        M = self.spec.targets
        copies = self.spec.canary_spec.inserted  # type: ignore[union-attr]  # set under the protocol
        base_cols = np.nonzero(self._is_in & ~self._is_canary)[1].reshape(M, -1)
        canary_cols = np.nonzero(self._is_in & self._is_canary)[1].reshape(M, -1)
        cols = torch.from_numpy(np.concatenate([base_cols, np.tile(canary_cols, (1, copies))], axis=1))
        return self._challenge_X[cols], self._challenge_y[cols]

    def _deal_rest(self, rest: np.ndarray, m: int) -> None:
        """From the records outside the challenge, in the split's order: the test set, the population and the
        defender's reference set (``reference`` records, else up to ``m`` of those the population leaves)."""
        t = self.spec.test
        self.test = rest[:t]
        tail = rest[t:]
        r = self.spec.reference or 0
        self.population = tail[: self.spec.population] if self.spec.population else tail[: len(tail) - r]
        self.reference = tail[len(self.population):][: r or m]

    def _deal(self, members: np.ndarray, nonmembers: np.ndarray) -> None:
        """The challenge (members and non-members, shuffled) and, from the other records in the split's order,
        the test set, the population and the defender's reference set."""
        m = len(members)
        self.members, self.nonmembers = members, nonmembers
        taken = np.zeros(self.dataset.n, dtype=bool)
        taken[members] = taken[nonmembers] = True
        self._deal_rest(self._order[~taken[self._order]], m)
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
        canaries = spec.canary_spec
        return spec.members + (canaries.count // 2 * canaries.inserted if canaries is not None else 0)

    @classmethod
    def rank_metric_of(cls, spec: GameSpec) -> str | None:
        """The vulnerable-record TPR at 0.1 % FPR under that protocol, else TPR at 1 % FPR."""
        return RANK_METRIC if getattr(spec, "vulnerable", False) else cls.rank_metric

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
        if getattr(spec, "vulnerable", False):
            return [("name", f"defense {getattr(defense, 'name', '?')!r} releases one model trained elsewhere; the "
                             "vulnerable-record protocol (targets > 1) trains its own targets")]
        try:
            hand_over(dataset, arch)
        except ValueError as exc:
            field, _, message = str(exc).partition(": ")
            return [(field, message) if message and field.isidentifier() else ("", str(exc))]
        return []

    def release(self, procedure: TrainingProcedure) -> Release:  # type: ignore[override]  # narrowed to TrainingProcedure
        if self.spec.vulnerable:
            return self._release_targets(procedure)
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

    def _release_targets(self, procedure: TrainingProcedure) -> Release:
        """The M targets of the vulnerable-record protocol, trained as a pool is (chunks of ``procedure.chunk``,
        each a batched call and a cache entry); utility: their mean test accuracy."""
        self._screen(procedure)
        X, y = self._target_training_sets()
        if procedure.defense.needs_reference:  # every member trains; the reference set is outside the challenge
            Xr, yr = self.records(self.reference)
            procedure = dataclasses.replace(procedure, reference_X=Xr, reference_y=yr)
        init, train = torch.from_numpy(self._plan.init_seeds), torch.from_numpy(self._plan.train_seeds)
        size = procedure.chunk
        chunks = [(X[s : s + size], y[s : s + size], init[s : s + size], train[s : s + size])
                  for s in range(0, len(X), size)]
        parts, claim = procedure.train_chunked(chunks)
        models = Models.cat(parts)
        Xt, yt = self.records(self.test)
        return Release(models=models, utility=float(models.accuracy(Xt, yt).mean()), claim=claim)

    def view(  # type: ignore[override]  # narrowed to TrainingProcedure
        self, attack: Attack, release: Release, procedure: TrainingProcedure
    ) -> MembershipView:
        """What ``attack`` may see: the challenge records (features and class labels, never membership) and the
        shape of one record (``input_shape``, e.g. (1, 8, 8) for an image, (d,) for a table row)."""
        if self.spec.vulnerable:
            self._screen(procedure)
            return self._target_view(attack, release, procedure, 0, groups(self.spec.targets)[0].shadows)
        cX, cy = self.records(self.challenge)
        return self._view(attack, release.models, procedure, cX, cy, derive_seed(self.seed, "attack", attack.name),
                          None, None)

    def _view(self, attack: Attack, models: Models, procedure: TrainingProcedure, cX: torch.Tensor,
              cy: torch.Tensor, seed: int, shadows: Models | None, shadow_in: np.ndarray | None) -> MembershipView:
        pX, py = self.records(self.population)
        train = procedure if self._shadows is None else self._shadows
        if train.defense.needs_reference:  # the attacker's shadows: its own population is their reference set
            train = dataclasses.replace(train, reference_X=pX, reference_y=py)
        return MembershipView(attack.name, attack.threat_model, {
            "challenge_X": cX,
            "challenge_y": cy,
            "n_classes": self.dataset.n_classes,
            "input_shape": self.dataset.shape,
            "train_size": self.train_size(self.spec),
            "seed": seed,
            "pool_seed": derive_seed(self.seed, "shadow-pool"),
            "model": BlackBox(models),
            "labels_model": LabelOnly(models),
            "parameters": models,
            "population_X": pX,
            "population_y": py,
            "train": train,
            "shadow_models": shadows,
            "shadow_in": shadow_in,
        })

    def _target_view(self, attack: Attack, release: Release, procedure: TrainingProcedure, target: int,
                     shadows: slice) -> MembershipView:
        """Target ``target``'s view under the vulnerable-record protocol, with the targets ``shadows`` (never its
        own half) as the shadow models an attack that trains shadows is handed. The attack's seed is one for every
        target: the attack is one randomised procedure applied to M targets (its random queries are then the same
        records for each, so the shadows answer them once per process, ``Models.logits``' memo)."""
        return self._view(attack, release.models.part(target, target + 1), procedure, self._challenge_X,
                          self._challenge_y, derive_seed(self.seed, "attack", attack.name),
                          release.models.part(shadows.start, shadows.stop), self._is_in[shadows].copy())

    def view_groups(  # type: ignore[override]  # narrowed to TrainingProcedure
        self, attack: Attack, release: Release, procedure: TrainingProcedure
    ) -> list[list[MembershipView]]:
        """One view; under the vulnerable-record protocol every target's, in the four groups of
        ``vulnerable.groups`` (each answered by an attack process of its own), targets in ascending order."""
        if not self.spec.vulnerable:
            return [[self.view(attack, release, procedure)]]
        self._screen(procedure)
        return [[self._target_view(attack, release, procedure, t, g.shadows) for t in g.attacked]
                for g in groups(self.spec.targets)]

    def score_all(self, attack: Attack, guesses: list[Any]) -> Outcome:
        """``score`` of the one guess; under the vulnerable-record protocol, the guesses of ``view_groups``' order:
        population metrics over the base records (every target's members and non-members, pooled: averages over
        the population, labelled so), the vulnerable-record metrics over the (canary, target) pairs."""
        if not self.spec.vulnerable:
            return super().score_all(attack, guesses)
        order = [t for g in groups(self.spec.targets) for t in g.attacked]
        if len(guesses) != len(order):
            raise ValueError(f"attack {attack.name!r}: {len(guesses)} guesses for {len(order)} targets")
        n = len(self._challenge_y)
        scores = np.empty((len(order), n))
        decisions = np.empty((len(order), n), dtype=bool)
        for t, guess in zip(order, guesses, strict=True):
            scores[t], decisions[t] = self._checked(attack, guess)
        if not np.all(np.isfinite(scores)):
            raise ValueError(f"attack {attack.name!r} returned NaN or infinite scores")
        base = ~self._is_canary
        metrics, notes, population_points = membership_scores(
            scores[:, base].reshape(-1), self._is_in[:, base].reshape(-1), decisions[:, base].reshape(-1))
        notes = [f"population average over {len(order)} targets: {note}" for note in notes]
        found, points, vr_notes = vulnerable_metrics(scores[:, self._is_canary], self._is_in[:, self._is_canary])
        metrics.update(found)
        canaries = self.spec.canary_spec
        assert canaries is not None
        vr_notes.insert(0, f"vulnerable records: {canaries.count} {canaries.kind} canaries (each in half of "
                           f"{len(order)} targets, {canaries.inserted} cop{'y' if canaries.inserted == 1 else 'ies'} "
                           "when in); population metrics (auc, tpr@…) pool the base records of every target")
        references = {_references(attack, g) for g in guesses if g.references is not None}
        if references:
            metrics["reference_points"] = min(references)
        targets = np.repeat(np.arange(len(order)), n)
        arrays: dict[str, np.ndarray] = {
            "scores": scores.reshape(-1),
            "is_member": self._is_in.reshape(-1).astype(np.int8),
            "target": targets.astype(np.int64),
            "canary": np.tile(self._is_canary, len(order)).astype(np.int8),
            "record": np.tile(self._record, len(order)),
            "label": np.tile(self._challenge_y.numpy(), len(order)).astype(np.int64),
        }
        return Outcome(metrics, [*notes, *vr_notes], arrays, {**population_points, **points})

    def _checked(self, attack: Attack, guess: Any) -> tuple[np.ndarray, np.ndarray]:
        """A guess's scores and decisions as float64 and bool arrays of one entry per challenge point."""
        if not isinstance(guess, MembershipGuess):
            raise TypeError(f"attack {attack.name!r} returned {type(guess).__name__}, not a MembershipGuess")
        scores = np.asarray(guess.scores, dtype=np.float64).reshape(-1)
        decisions = np.asarray(guess.decisions).reshape(-1)
        if len(scores) != len(self.challenge) or len(decisions) != len(self.challenge):
            raise ValueError(
                f"attack {attack.name!r} returned {len(scores)} scores for {len(self.challenge)} challenge points"
            )
        return scores, decisions.astype(bool)

    def score(self, attack: Attack, guess: Any) -> Outcome:
        """The guess's metrics against the secret membership, and the arrays the audit and the report read."""
        if self.spec.vulnerable:
            raise ValueError("the vulnerable-record protocol scores one guess per target: score_all(attack, guesses)")
        scores, decisions = self._checked(attack, guess)
        metrics, notes, points = membership_scores(scores, self._is_member, decisions)
        out = scores[~self._is_member]
        ties = int(np.sum(out == out.max()))
        metrics["top_ties"] = ties  # non-members sharing the top non-member score: no TPR below ties/n at lower FPR
        if ties > 1:
            notes.append(f"{ties} non-members share the top non-member score: below FPR {ties / len(out):.2%} the "
                         "attack's TPR is 0 by construction")
        if guess.references is not None:
            metrics["reference_points"] = _references(attack, guess)
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
        return Outcome(metrics, notes, arrays, points)

    def pairs(self) -> np.ndarray:
        """[2m] each challenge point's pair id (member i and non-member i share id i), −1 for the points of a pair
        whose two records have different labels (dropped: the paired audit swaps records of one label)."""
        m = len(self.members)
        ids = np.r_[np.arange(m), np.arange(m)]
        y = np.asarray(self.dataset.y)
        same = y[self.members] == y[self.nonmembers]
        ids = np.where(np.r_[same, same], ids, -1)
        return ids[self._shuffle].astype(np.int64)  # the challenge is [members, non-members][shuffle]


MAX_REFERENCES = 1 << 53
"""The most reference points a guess may declare: a whole number exact as a float64, so that no reader of the row
overflows (``10**4000`` is refused, the attack's failure)."""


def _references(attack: Attack, guess: MembershipGuess) -> int:
    """A guess's ``references`` as an ``int`` in [0, 2^53]; ``ValueError`` naming the attack otherwise."""
    value = guess.references
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value <= MAX_REFERENCES:
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            text = str(value)
            shown = text if len(text) <= 24 else f"a whole number of {len(text.lstrip('-'))} digits"
        else:
            shown = f"a {type(value).__name__}"
        raise ValueError(f"attack {attack.name!r} returned references = {shown}: a whole number in [0, 2^53] "
                         "expected")
    return int(value)
