"""The claim check of a canary audit: what the defense really ran, read from the engine's instruments.

The DP-SGD ``train`` calls of the release and every Laplace draw with a declared sensitivity are composed by the
PLD accountant (``arena.privacy.composition``) the way the mechanism actually run composes them:

- **sequential** when every call trained on all the records the audit handed the defense (a defense that trains
  twice on its data, each call calibrated to the full ε, ran a mechanism about twice as leaky as it claims, and the
  largest single call's ε would hide it); a single call is accounted alone;
- **parallel** when every call trained on all the records or on exactly one cell of a data-independent partition
  (``arena.engine.partition.hash_partition``: a record's cell is a hash of the record alone, so adding or removing
  one record changes one cell). The check recomputes the cells from the data and verifies each call's record set
  against them; cells are disjoint by construction. A record then takes part in the calls on all the records and
  those on its cell: the ε is the largest over the cells of the composition of those calls;
- **undecided** otherwise: calls on different record sets that are not cells of such a partition (a split by a
  feature's median or by a sort is disjoint but depends on the data, so parallel composition need not hold and
  sequential composition is no bound either), or calls whose rows are not the audit's records (transformed data).
  The check then says it cannot decide (``epsilon`` None; the sequential composition of every call is recorded
  beside it for the reader), and declares no violation: the canaries' tests speak alone.

Laplace draws are composed with every cell's calls (they may read any record). A Laplace draw without a declared
sensitivity cannot be accounted; it is counted, and the composed ε of the rest is then a lower bound on the
release's, which is all a refutation needs. The check also says whether the release is bit for bit a state
``train`` returned: only then are the canaries' scores the trained parameters' (a linear function of the Gaussian
noise), the hypothesis of the model-based Gaussian and σ fits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import torch

from arena.engine.instruments import AuditInstruments, Mechanism, state_digest
from arena.privacy.composition import composed_epsilon

SIGMA_FLOOR = 0.3
"""A σ below it is accounted at it (where the PLD grid stays small): the ε is then a lower bound on the run's."""

Composition = Literal["none", "single", "sequential", "parallel", "undecided"]


@dataclass(frozen=True)
class ClaimCheck:
    """``epsilon``: the PLD ε (add/remove, at the claim's δ) of the mechanisms as ``composition`` composes them, ∞
    if one adds no noise, None where it cannot be computed (δ = 0, nothing recorded) or decided; ``runs`` DP-SGD
    calls and ``laplace`` Laplace draws composed, ``unaccounted`` draws left out (no sensitivity declared);
    ``trained_release``: the release is bit for bit the state one of the calls returned; ``composition``: how the
    calls compose (module docstring); ``cells``: the partition's cells under parallel composition;
    ``sequential_epsilon``: every call composed sequentially (shown where the check cannot decide)."""

    epsilon: float | None
    runs: int
    laplace: int
    unaccounted: int
    trained_release: bool
    composition: Composition = "sequential"
    cells: int = 0
    sequential_epsilon: float | None = None

    @property
    def decided(self) -> bool:
        return self.composition != "undecided"

    def as_dict(self) -> dict[str, float | int | bool | str | None]:
        return dict(self.__dict__)


def _gaussian(runs: list[Mechanism]) -> list[tuple[float, float, int]]:
    return [(0.0 if r.noise_multiplier == 0 else max(r.noise_multiplier, SIGMA_FLOOR), r.sample_rate, r.steps)
            for r in runs]


def composition(runs: list[Mechanism]) -> tuple[Composition, int]:
    """How the calls ``runs`` compose, and the number of cells under parallel composition (module docstring)."""
    if not runs:
        return "none", 0
    if len(runs) == 1:
        return "single", 0
    covers = {r.cover for r in runs}
    if covers == {"all"} or (len(covers) == 1 and not covers & {"unknown"}):
        return "sequential", 0  # every call on the same records
    cells = {c.split(":")[1] for c in covers if c.startswith("cell:")}
    if len(cells) == 1 and covers <= {"all"} | {c for c in covers if c.startswith("cell:")}:
        return "parallel", int(next(iter(cells)))
    return "undecided", 0


def check_claim(instruments: AuditInstruments, delta: float, release: Mapping[str, torch.Tensor]) -> ClaimCheck:
    """The claim check of the mechanisms ``instruments`` recorded, for a claim at ``delta`` and the released state."""
    accounted = [d for d in instruments.laplace if d.l1_sensitivity is not None and d.l1_sensitivity > 0]
    unaccounted = len(instruments.laplace) - len(accounted)
    trained = state_digest(dict(release)) in instruments.returned
    laplace = [d.scale / d.l1_sensitivity for d in accounted if d.l1_sensitivity]
    runs = list(instruments.runs)
    how, cells = composition(runs)
    eps = seq = None
    if 0 < delta < 1 and runs:
        seq = composed_epsilon(_gaussian(runs), laplace, delta)
        if how == "parallel":
            shared = [r for r in runs if r.cover == "all"]
            eps = max(composed_epsilon(_gaussian(shared + [r for r in runs if r.cover == f"cell:{cells}:{c}"]),
                                       laplace, delta) for c in range(cells))
        elif how != "undecided":
            eps = seq
    return ClaimCheck(eps, len(runs), len(accounted), unaccounted, trained, how, cells, seq)
