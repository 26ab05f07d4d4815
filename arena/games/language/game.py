"""The language game: the membership game's challenger-drawn split and scoring on text records, a causal language
model as the release, next-token accuracy on held-out text as its utility, and the exposure of canaries."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from arena.contracts.attack import Attack
from arena.contracts.dataset import Dataset, TextDataset
from arena.contracts.game import Outcome
from arena.contracts.metric import Metric
from arena.contracts.release import Release
from arena.contracts.spec import GameSpec
from arena.engine.seeds import derive_seed
from arena.games.language.exposure import (
    Canaries,
    make_canaries,
    measure,
    records,
    secret_tokens,
    training_rows,
)
from arena.games.language.query import TextBlackBox, next_token_accuracy
from arena.games.language.spec import LanguageGameSpec, LanguageView
from arena.games.membership.game import MembershipGame
from arena.pipeline.procedure import TrainingProcedure

SHIFT = ("split: members from one source and non-members from another measure the shift between the sources, not "
         "membership (Duan et al. 2024; Das et al. 2024); the language game draws its split at random from every "
         "record (split: random)")

EXPOSURE_METRICS = (
    Metric("perplexity", "language", higher_is_better=False,
           description="the release's perplexity on the held-out test set"),
    Metric("exposure", "language", higher_is_better=True,
           description="mean exposure in bits of the canaries (log2|R| - log2 rank), every repetition count"),
    Metric("exposure_max", "language", higher_is_better=True, description="largest exposure of a canary, in bits"),
    Metric("extracted_greedy", "language", higher_is_better=True,
           description="canaries that greedy completion of the prefix writes"),
    Metric("extracted_beam", "language", higher_is_better=True,
           description="canaries that beam completion of the prefix writes"),
)


class LanguageGame(MembershipGame):
    """Members vs non-members of a causal language model's fine-tuning set (documents or chunks of a text dataset),
    one score per challenge record, and optionally the secret sharer's canaries (``exposure``): secrets inserted
    into the training set, whose exposure in the release is measured by the challenger (the same for every attack
    of a release: a property of the release, not of an attack)."""

    name = "language"
    Spec = LanguageGameSpec  # type: ignore[assignment]  # a MembershipGameSpec, narrowed
    View = LanguageView  # type: ignore[assignment]  # the text attacks' view, not the membership one
    metrics = EXPOSURE_METRICS
    reports_metrics_of = ("membership",)
    audit_rule = "arena.games.membership.rule:audit_game"
    supplies_reference = False
    spec: LanguageGameSpec
    dataset: TextDataset

    def __init__(self, spec: LanguageGameSpec, dataset: Any, seed: int) -> None:
        if not isinstance(dataset, TextDataset):
            raise ValueError(f"the language game plays text datasets; {dataset.name!r} is {dataset.kind}")
        super().__init__(spec, dataset, seed)
        self.canaries: Canaries | None = None  # type: ignore[assignment]  # the membership game's are other canaries
        self._exposure: dict[str, list] | None = None
        self._text_utility: tuple[float, float] | None = None
        if spec.exposure is not None:
            self.canaries = make_canaries(spec.exposure, dataset.tokenizer, dataset.shape[0],
                                          derive_seed(seed, "language-canaries"))

    @classmethod
    def problems(cls, spec: GameSpec, dataset: Dataset) -> list[tuple[str, str]]:
        if not isinstance(dataset, TextDataset):
            return [("", f"the language game plays text datasets (pydoc-topics, text); {dataset.name!r} is "
                         f"{dataset.kind}")]
        if getattr(spec, "split", "random") != "random":
            return [("split", SHIFT)]
        exposure = getattr(spec, "exposure", None)
        if exposure is not None:
            try:
                records([secret_tokens(dataset.tokenizer, exposure.prefix).ids("0" * exposure.digits)],
                        dataset.shape[0])
            except ValueError as exc:
                field, _, why = str(exc).partition(": ")
                return [(field, why)]
        return super().problems(spec, dataset)

    @classmethod
    def train_size(cls, spec: LanguageGameSpec) -> int:  # type: ignore[override]  # narrowed to the game's Spec
        return spec.members + (spec.exposure.copies if spec.exposure is not None else 0)

    def release(self, procedure: TrainingProcedure) -> Release:  # type: ignore[override]
        X, y = self.records(self.members)
        if self.canaries is not None:
            rows = training_rows(self.canaries)
            X, y = torch.cat([X, rows]), torch.cat([y, torch.zeros(len(rows), dtype=y.dtype)])
        models, claim = procedure(X[None], y[None], [derive_seed(self.seed, "release-init")],
                                  [derive_seed(self.seed, "release-train")])
        accuracy, ppl = next_token_accuracy(models, self.records(self.test)[0])
        self._text_utility = (accuracy, ppl)
        if self.canaries is not None and self.spec.exposure is not None:
            self._exposure = measure(models, self.canaries, self.spec.exposure, self.dataset.tokenizer,
                                     self.dataset.shape[0])
        return Release(models=models, utility=accuracy, claim=claim)

    def view(self, attack: Attack, release: Release, procedure: TrainingProcedure) -> LanguageView:  # type: ignore[override]
        """The challenge records, the tokenizer, and what the attack's threat model grants."""
        cX, cy = self.records(self.challenge)
        pX, py = self.records(self.population)
        return LanguageView(attack.name, attack.threat_model, {
            "challenge_X": cX,
            "challenge_y": cy,
            "tokenizer": self.dataset.tokenizer,
            "n_classes": self.dataset.n_classes,
            "input_shape": self.dataset.shape,
            "train_size": self.spec.members,  # shadows train on halves of the challenge, as the target's members
            "seed": derive_seed(self.seed, "attack", attack.name),
            "pool_seed": derive_seed(self.seed, "shadow-pool"),
            "model": TextBlackBox(release.models),
            "parameters": release.models,
            "population_X": pX,
            "population_y": py,
            "train": procedure,
        })

    def score(self, attack: Attack, guess: Any) -> Outcome:
        """The membership metrics of the guess, the release's perplexity and, with canaries, their exposure."""
        outcome = super().score(attack, guess)
        if self._text_utility is not None:
            outcome.metrics["perplexity"] = self._text_utility[1]
        if self._exposure is not None and self.canaries is not None:
            outcome.metrics.update(exposure_metrics(self._exposure, self.canaries.repetitions))
            outcome.arrays.update({f"canary_{k}": np.asarray(v, dtype=np.float64) for k, v in self._exposure.items()})
            outcome.arrays["canary_repetitions"] = np.asarray(self.canaries.repetitions, dtype=np.int64)
            by_copies = ", ".join(f"{r} cop{'y' if r == 1 else 'ies'}: {v:.2f} bits"
                                  for r, v in exposure_by_copies(self._exposure, self.canaries.repetitions).items())
            outcome.notes.append(f"exposure of {len(self.canaries.secrets)} canaries among 10^"
                                 f"{self.spec.exposure.digits if self.spec.exposure else '?'} candidates (the same "
                                 f"for every attack on this release), mean by copies inserted: {by_copies}")
        return outcome


def exposure_metrics(found: dict[str, list], repetitions: list[int]) -> dict[str, float]:
    """Mean and largest exposure over the canaries, and how many greedy and beam completion extract."""
    bits = np.asarray(found["exposure"], dtype=np.float64)
    return {"exposure": float(bits.mean()), "exposure_max": float(bits.max()),
            "extracted_greedy": float(np.sum(found["greedy"])), "extracted_beam": float(np.sum(found["beam"]))}


def exposure_by_copies(found: dict[str, list], repetitions: list[int]) -> dict[int, float]:
    """Mean exposure of the canaries inserted r times, for each r."""
    bits, reps = np.asarray(found["exposure"], dtype=np.float64), np.asarray(repetitions)
    return {int(r): float(bits[reps == r].mean()) for r in sorted(set(reps.tolist()))}
