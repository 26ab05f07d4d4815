"""Built-in membership attacks: the loss / confidence threshold attack."""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from arena.attack import Attack, MembershipGuess
from arena.hookspecs import hookimpl


class ThresholdParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    signal: Literal["loss", "confidence"] = "loss"
    fpr: float = Field(default=0.1, gt=0.0, lt=1.0, description="FPR the hard threshold is calibrated for")


def threshold_signal(model, X: torch.Tensor, y: torch.Tensor, signal: str) -> np.ndarray:  # noqa: ANN001
    """Higher means more member-like: negative loss, or the top predicted probability."""
    if signal == "loss":
        return (-model.loss(X, y)).double().numpy()
    return model.predict_proba(X).max(dim=-1).values.double().numpy()


class ThresholdMIA(Attack):
    """Yeom et al.'s attack: members have lower loss. The hard threshold is set on the attacker's population data
    (known non-members) so that the population's false-positive rate is ``fpr``; challenge labels are never used."""

    name = "threshold-mia"
    threat_model = frozenset({"query", "population"})
    Params = ThresholdParams
    params: ThresholdParams

    def run(self, view) -> MembershipGuess:  # noqa: ANN001
        scores = threshold_signal(view.model, view.challenge_X, view.challenge_y, self.params.signal)
        reference = threshold_signal(view.model, view.population_X, view.population_y, self.params.signal)
        threshold = float(np.quantile(reference, 1.0 - self.params.fpr))
        return MembershipGuess(scores=scores, decisions=scores > threshold)


@hookimpl
def register_attacks(register) -> None:  # noqa: ANN001
    register(ThresholdMIA)
