"""An attack plugin: two loss attacks, one on the built-in membership game, one on the example attribute game.

The membership attack is the calibrated-loss attack (Watson et al. 2022, "On the importance of difficulty
calibration in membership attacks").

A record's loss under the released model says little by itself: some records are hard for every model. The
attack subtracts a reference, the mean (log-)loss of population records of the same class, so that what is left
is how much better the model fits this record than records like it: members are fitted better. The attribute
attack fills each candidate value into the blanked column and keeps the one the model fits best.

Scenario files name them ``attacks: [{name: example-calibrated-loss, fpr: 0.05}]`` (membership tracks) and
``attacks: [{name: example-attribute-loss}]`` (tracks of the example-attribute game, which the distribution
arena-example-game registers). Both declare the threat model ``query`` (the model's losses on chosen points) +
``population`` (records from the same distribution that are neither members nor targets); the arena gives
their ``run`` a view with exactly those items, in a process of its own.
"""

from __future__ import annotations

import numpy as np
import torch
from pydantic import Field

from arena import Attack, MembershipGuess, MembershipView, PluginParams, hookimpl
from arena_example_game import AttributeGuess, AttributeView  # another distribution's public types


def class_means(values: torch.Tensor, y: torch.Tensor, n_classes: int) -> torch.Tensor:
    """Mean of ``values`` [..., n] over the records of each class, [..., n_classes]; a class with no record gets
    the overall mean."""
    counts = torch.bincount(y, minlength=n_classes).to(values.dtype)
    sums = torch.zeros(*values.shape[:-1], n_classes, dtype=values.dtype).index_add_(-1, y, values)
    overall = values.mean(-1, keepdim=True).expand_as(sums)
    return torch.where(counts > 0, sums / counts.clamp_min(1.0), overall)


class CalibratedLossParams(PluginParams):
    fpr: float = Field(default=0.1, gt=0.0, lt=1.0,
                       description="false-positive rate on the population that the hard decisions are set for")


LOSS_FLOOR = 1e-12


def log_loss(model, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # noqa: ANN001 - a BlackBox
    """log of each record's cross-entropy, float64 [n]; a loss that rounds to zero counts as LOSS_FLOOR."""
    return model.loss(X, y).double().clamp_min(LOSS_FLOOR).log()


class CalibratedLoss(Attack):
    """Score = the mean log-loss of population records of the record's class minus the record's own log-loss
    (higher: more member-like); decide "member" above the population's own (1 - fpr) quantile of that score.

    Losses are compared in log space: they are heavy-tailed (a population record with a noisy label has a loss
    many times the others'), and a plain mean would be that record's rather than the class's."""

    name = "example-calibrated-loss"
    version = "1"
    game = "membership"
    threat_model = frozenset({"query", "population"})
    Params = CalibratedLossParams
    params: CalibratedLossParams

    def run(self, view: MembershipView) -> MembershipGuess:
        reference = log_loss(view.model, view.population_X, view.population_y)
        difficulty = class_means(reference, view.population_y, view.n_classes)
        scores = difficulty[view.challenge_y] - log_loss(view.model, view.challenge_X, view.challenge_y)
        threshold = float(torch.quantile(difficulty[view.population_y] - reference, 1.0 - self.params.fpr))
        return MembershipGuess(scores=scores.numpy(), decisions=(scores > threshold).numpy())


class AttributeLossParams(PluginParams):
    calibrate: bool = Field(default=False, description="subtract, per class and candidate value, the population's "
                            "mean loss with that value filled in (difficulty calibration, as for membership)")


class AttributeLoss(Attack):
    """Fill each candidate value into the blanked column, query the loss, and guess the value the model fits best
    (Yeom et al. 2018). With ``calibrate`` each loss is taken relative to population records of the same class
    with the same value filled in: that removes what the model knows about the population, so what is left is
    the record-specific fit; on the example blobs it costs accuracy on members and non-members alike."""

    name = "example-attribute-loss"
    version = "1"
    game = "example-attribute"
    threat_model = frozenset({"query", "population"})
    Params = AttributeLossParams
    params: AttributeLossParams

    @staticmethod
    def _filled(X: torch.Tensor, column: int, candidates: torch.Tensor) -> torch.Tensor:
        """[L, n, d]: ``X`` with ``column`` set to each candidate value in turn."""
        out = X.unsqueeze(0).repeat(len(candidates), 1, 1)
        out[:, :, column] = candidates.to(X.dtype).unsqueeze(1)
        return out

    def _losses(self, view: AttributeView, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Loss [L, n] of each record with each candidate value filled in (one query for all of them)."""
        L, n = len(view.candidates), len(y)
        filled = self._filled(X, view.column, view.candidates).reshape(L * n, -1)
        return view.model.loss(filled, y.repeat(L)).double().reshape(L, n)

    def run(self, view: AttributeView) -> AttributeGuess:
        loss = self._losses(view, view.targets_X, view.targets_y)  # [L, t]
        if self.params.calibrate:
            reference = self._losses(view, view.population_X, view.population_y)  # [L, p]
            loss = loss - class_means(reference, view.population_y, view.n_classes)[:, view.targets_y]
        return AttributeGuess(choice=loss.argmin(0).numpy().astype(np.int64))


@hookimpl
def register_attacks(register) -> None:  # noqa: ANN001 - the registry's callback
    register(CalibratedLoss)
    register(AttributeLoss)
