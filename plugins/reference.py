"""Reference-model attacks on the loss: Ye, Maddi, Murakonda, Bindschaedler & Shokri, "Enhanced Membership Inference
Attacks against Machine Learning Models" (CCS 2022), and Watson, Guo, Cormode & Sablayrolles, "On the Importance
of Difficulty Calibration in Membership Inference Attacks" (ICLR 2022).

Each is a hypothesis test on the target's loss ℓ(θ, x), with its threshold estimated from a different
distribution of non-member losses:

- ``attack-p`` (Ye et al.'s Attack P, population): the target's losses on population records, one threshold
  c_α for every x; member when ℓ(θ, x) ≤ c_α.
- ``attack-r`` (Ye et al.'s Attack R, reference models): the losses ℓ(θ', x) of x under reference models θ' that
  did not train on x, one threshold c_α(x) per record; member when ℓ(θ, x) ≤ c_α(x). Few references make a coarse
  empirical distribution, so, as ML Privacy Meter does, the α-quantile is read off the linear interpolation of the
  sorted references with the loss bounds 0 and ``LOSS_CAP`` appended (``numpy.quantile``'s linear method).
- ``calibration`` (Watson et al.): the difficulty-calibrated loss ℓ(θ, x) - mean_θ' ℓ(θ', x) over the same
  references; member when it is below a threshold, set on population records for a false-positive rate ``fpr``.

The references are a shadow pool (``arena.train_pool``). By default (``data: population``, Ye et al.'s threat
model) they train on halves of the population, disjoint from the challenge, so every challenge point is outside
every reference (K OUT references per point); the population then needs at least twice the training-set size.
``data: challenge`` trains them on halves of the challenge set instead (the pool shared with lira, rmia, …), each
challenge point then having only the K/2 references that did not train on it.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from arena import Attack, MembershipGuess, MembershipView, PluginParams, PoolData, hookimpl, train_pool
from arena_plugins.membership import ShadowCount

LOSS_CAP = 1000.0
"""Upper end of the interpolated loss distribution (a cross-entropy past it counts as this much): ML Privacy
Meter's ``signal_max`` for its linear-interpolation threshold."""


def augmented(refs: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per column of ``refs`` [K, n], its c = ``mask``.sum() values sorted, between the bounds 0 and ``LOSS_CAP``:
    rows 0..c+1 of the returned [K + 2, n] (+inf below), and c [n]."""
    counts = mask.sum(axis=0)
    if np.any(counts == 0):
        raise ValueError("every point needs at least one reference model that did not train on it")
    values = np.sort(np.where(mask, np.clip(refs, 0.0, LOSS_CAP), np.inf), axis=0)
    out = np.vstack([np.zeros((1, refs.shape[1])), values, np.full((1, refs.shape[1]), np.inf)])
    out[counts + 1, np.arange(refs.shape[1])] = LOSS_CAP
    return out, counts


def interpolated_cdf(refs: np.ndarray, mask: np.ndarray, loss: np.ndarray) -> np.ndarray:
    """F_x(ℓ) per column: the level α at which ``numpy.quantile(v, α)`` (linear) of the column's references with
    the bounds appended, v = (0, sorted refs, ``LOSS_CAP``), equals ``loss`` [n], so that F_x(ℓ) ≤ α exactly when
    ℓ ≤ c_α(x)."""
    v, counts = augmented(refs, mask)
    loss = np.clip(loss, 0.0, LOSS_CAP)
    cols = np.arange(v.shape[1])
    i = np.minimum((v <= loss).sum(axis=0) - 1, counts)  # last point at or below ℓ, at most the one before the cap
    return _between(v[i, cols], v[i + 1, cols], i, counts, loss)


def shared_cdf(refs: np.ndarray, loss: np.ndarray) -> np.ndarray:
    """``interpolated_cdf`` when every record shares the same references [K] (Attack P's population losses):
    one sorted column, searched for each loss [n]."""
    v, counts = augmented(refs[:, None], np.ones((len(refs), 1), dtype=bool))
    v, c = v[: counts[0] + 2, 0], int(counts[0])
    loss = np.clip(loss, 0.0, LOSS_CAP)
    i = np.minimum(np.searchsorted(v, loss, side="right") - 1, c)
    return _between(v[i], v[i + 1], i, np.full(len(loss), c), loss)


def _between(lo: np.ndarray, hi: np.ndarray, i: np.ndarray, counts: np.ndarray, loss: np.ndarray) -> np.ndarray:
    """The level of ``loss`` on the segment from point i (``lo``) to point i + 1 (``hi``) of c + 2 points."""
    frac = np.where(hi > lo, (loss - lo) / np.where(hi > lo, hi - lo, 1.0), 1.0)
    return (i + frac) / (counts + 1)


class ReferenceParams(PluginParams):
    variant: Literal["attack-p", "attack-r", "calibration"] = "attack-r"
    shadows: ShadowCount = Field(default=8, strict=True, ge=2, le=100_000,
                                 description="reference models (even); attack-p trains none")
    data: PoolData = Field(default="population", description="what the references train on: halves of the "
                           "population, disjoint from the challenge (Ye et al.'s setting, the default), or of the "
                           "challenge set (the pool shared with lira and rmia; K/2 OUT references per point)")
    fpr: float = Field(default=0.1, strict=True, gt=0.0, lt=1.0,
                       description="level α of the test (attack-p, attack-r) or population FPR (calibration)")


class ReferenceMIA(Attack):
    """Ye et al.'s Attack P and Attack R and Watson et al.'s difficulty calibration on the loss (module
    docstring). Scores: 1 - F(ℓ) for the two tests (F the interpolated distribution of the non-member losses),
    the negated calibrated loss for ``calibration``; higher means member."""

    name = "reference"
    version = "2"
    game = "membership"
    threat_model = frozenset({"query", "population", "training"})
    Params = ReferenceParams
    params: ReferenceParams

    def run(self, view: MembershipView) -> MembershipGuess:
        p = self.params
        loss = view.model.loss(view.challenge_X, view.challenge_y).double().numpy()
        if p.variant == "attack-p":
            pop = view.model.loss(view.population_X, view.population_y).double().numpy()
            level = shared_cdf(pop, loss)
            return MembershipGuess(scores=1.0 - level, decisions=level <= p.fpr)
        if p.data == "population" and len(view.population_y) < 2 * view.train_size:
            raise ValueError(f"data: population needs at least {2 * view.train_size} population records (two "
                             f"halves of {view.train_size}), got {len(view.population_y)}")
        pool = train_pool(view, p.shadows, p.data)
        refs = pool.models.loss(view.challenge_X, view.challenge_y).double().numpy()  # [K, 2m]
        out = ~pool.challenge_in if p.data == "challenge" else np.ones_like(refs, dtype=bool)
        if p.variant == "attack-r":
            level = interpolated_cdf(refs, out, loss)
            return MembershipGuess(scores=1.0 - level, decisions=level <= p.fpr)
        scores = calibrated(refs, out, loss)
        pop_refs = pool.models.loss(view.population_X, view.population_y).double().numpy()
        pop_out = np.ones_like(pop_refs, dtype=bool) if p.data == "challenge" else ~pool.challenge_in
        pop_loss = view.model.loss(view.population_X, view.population_y).double().numpy()
        threshold = float(np.quantile(calibrated(pop_refs, pop_out, pop_loss), 1.0 - p.fpr))
        return MembershipGuess(scores=scores, decisions=scores > threshold)


def calibrated(refs: np.ndarray, mask: np.ndarray, loss: np.ndarray) -> np.ndarray:
    """Watson et al.'s score: mean of the references' losses [K, n] where ``mask`` minus the target's loss [n]
    (the negated calibrated loss: higher means member)."""
    counts = mask.sum(axis=0)
    if np.any(counts == 0):
        raise ValueError("every point needs at least one reference model that did not train on it")
    return np.where(mask, refs, 0.0).sum(axis=0) / counts - loss


@hookimpl
def register_attacks(register) -> None:  # noqa: ANN001
    register(ReferenceMIA)
