"""The claim check of a canary audit: what the defense really ran, read from the engine's instruments.

Every DP-SGD ``train`` call of the release and every Laplace draw with a declared sensitivity are composed by the
PLD accountant (``arena.privacy.composition``): a defense that trains twice, each call calibrated to the full ε,
ran a mechanism about twice as leaky as it claims, and the largest single call's ε would hide it. A Laplace draw
without a declared sensitivity cannot be accounted; it is counted, and the composed ε of the rest is then a lower
bound on the release's, which is all a refutation needs. The check also says whether the release is bit for bit a
state ``train`` returned: only then are the canaries' scores the trained parameters' (a linear function of the
Gaussian noise), the hypothesis of the Gaussian-fit bound.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from arena.engine.instruments import AuditInstruments, state_digest
from arena.privacy.composition import composed_epsilon

SIGMA_FLOOR = 0.3
"""A σ below it is accounted at it (where the PLD grid stays small): the ε is then a lower bound on the run's."""


@dataclass(frozen=True)
class ClaimCheck:
    """``epsilon``: the PLD ε (add/remove, at the claim's δ) of every mechanism composed, ∞ if one adds no noise,
    None where it cannot be computed (δ = 0 or nothing recorded); ``runs`` DP-SGD calls and ``laplace`` Laplace
    draws composed, ``unaccounted`` draws left out (no sensitivity declared); ``trained_release``: the release is
    bit for bit the state one of the calls returned."""

    epsilon: float | None
    runs: int
    laplace: int
    unaccounted: int
    trained_release: bool

    def as_dict(self) -> dict[str, float | int | bool | None]:
        return dict(self.__dict__)


def check_claim(instruments: AuditInstruments, delta: float, release: Mapping[str, torch.Tensor]) -> ClaimCheck:
    """The claim check of the mechanisms ``instruments`` recorded, for a claim at ``delta`` and the released state."""
    accounted = [d for d in instruments.laplace if d.l1_sensitivity is not None and d.l1_sensitivity > 0]
    unaccounted = len(instruments.laplace) - len(accounted)
    trained = state_digest(dict(release)) in instruments.returned
    eps = None
    if 0 < delta < 1 and instruments.runs:
        gaussian = [(0.0 if r.noise_multiplier == 0 else max(r.noise_multiplier, SIGMA_FLOOR), r.sample_rate, r.steps)
                    for r in instruments.runs]
        eps = composed_epsilon(gaussian, [d.scale / d.l1_sensitivity for d in accounted if d.l1_sensitivity], delta)
    return ClaimCheck(eps, len(instruments.runs), len(accounted), unaccounted, trained)
