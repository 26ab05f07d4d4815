"""RMIA, the relative membership inference attack of Zarifzadeh, Liu, Cheng & Shokri, "Low-Cost High-Power
Membership Inference Attacks" (ICML 2024), on the shared shadow pool (``arena.train_pool``).

The signal is Pr(x|θ), the target's probability of x's true label (softmax of the logits at a temperature T,
the paper's signal for classifiers). RMIA tests x against many population records z at once:

- Pr(x) = E_θ' Pr(x|θ') over reference models θ' (the paper's normaliser of Eq. 3). Online, the references
  are the whole pool, half of which trained on x (each challenge point is IN for exactly half the shadows,
  so the average is ½(Pr_IN + Pr_OUT)). Offline, only the references that did not train on x are used and
  Pr(x) = ½((1 + a)·Pr_OUT(x) + (1 - a)): the paper's linear approximation Pr_IN ≈ a·Pr_OUT + (1 - a) of the
  missing IN models (Appendix, "offline RMIA").
- LR_θ(x, z) = (Pr(x|θ) / Pr(x)) / (Pr(z|θ) / Pr(z))  (Eq. 3).
- Score_MIA(x; θ) = Pr_z(LR_θ(x, z) ≥ γ), the fraction of the population sample Z with LR ≥ γ  (Eq. 4).

Population records are outside every reference model (the pool trains on the challenge set only), so their
Pr(z) always comes from the ``a`` approximation, in both variants: the same quantity ½(Pr_IN + Pr_OUT) that the
online Pr(x) averages, so x and z are normalised alike. Everything is computed on log probabilities, so a
confident model's p ≈ 1 and a hopeless p ≈ 1e-30 both keep their precision.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
from pydantic import Field, PositiveInt
from scipy.special import logsumexp

from arena import Attack, MembershipGuess, MembershipView, PluginParams, hookimpl, train_pool
from arena_plugins.membership import ShadowCount


def true_class_log_prob(log_probs: torch.Tensor, y: torch.Tensor, temperature: float) -> np.ndarray:
    """log Pr(x|θ) = log softmax(logits / T)[y], float64 [..., n], from logits or log-probabilities [..., n, C]
    (they differ by a constant per row, which the softmax removes); ``y`` [n] is shared by leading axes."""
    z = torch.log_softmax(log_probs.double() / temperature, dim=-1)
    return z.gather(-1, y.expand(z.shape[:-1]).unsqueeze(-1)).squeeze(-1).numpy()


def log_mean_prob(log_p: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """log of the mean over the references [K, n] where ``mask`` is True of Pr = exp(``log_p``), per column [n]."""
    counts = mask.sum(axis=0)
    if np.any(counts == 0):
        raise ValueError("every point needs at least one reference model")
    return logsumexp(np.where(mask, log_p, -np.inf), axis=0) - np.log(counts)


def offline_log_prob(log_p_out: np.ndarray, a: float) -> np.ndarray:
    """log Pr(x) = log ½((1 + a)·Pr_OUT(x) + (1 - a)) from log Pr_OUT(x): the paper's offline approximation."""
    return np.logaddexp(math.log1p(a) + log_p_out, math.log1p(-a) if a < 1 else -np.inf) - math.log(2.0)


def rmia_scores(log_ratio_x: np.ndarray, log_ratio_z: np.ndarray, gamma: float) -> np.ndarray:
    """Score_MIA(x) = |{z : LR(x, z) ≥ γ}| / |Z| for each x, given log(Pr(x|θ)/Pr(x)) [n] and
    log(Pr(z|θ)/Pr(z)) [m]; LR(x, z) ≥ γ ⇔ log ratio_z ≤ log ratio_x - log γ, counted by binary search."""
    ordered = np.sort(log_ratio_z)
    return np.searchsorted(ordered, log_ratio_x - math.log(gamma), side="right") / len(ordered)


class RMIAParams(PluginParams):
    shadows: ShadowCount = Field(default=4, ge=2, description="reference models (even; complementary pairs)")
    variant: Literal["online", "offline"] = "online"
    gamma: float = Field(default=1.0, gt=0.0, allow_inf_nan=False, description="threshold γ on LR(x, z)")
    a: float = Field(default=0.3, ge=0.0, le=1.0,
                     description="offline approximation Pr_IN ≈ a·Pr_OUT + (1 - a), used for points outside "
                                 "every reference model (ML Privacy Meter's default 0.3)")
    z: PositiveInt | None = Field(default=None, description="population records z drawn for Z (None: all)")
    temperature: float = Field(default=1.0, gt=0.0, allow_inf_nan=False, description="softmax temperature T")
    fpr: float = Field(default=0.1, gt=0.0, lt=1.0, description="population FPR the hard threshold is set for")


class RMIA(Attack):
    """Zarifzadeh et al.'s RMIA (Eq. 3-4): x is a member when its probability ratio Pr(x|θ)/Pr(x) beats that of
    many population records z. Z is ``z`` population records drawn with the attack's seed; the hard threshold is
    the (1 - ``fpr``) quantile of the score of every population record against Z without itself (population
    records are non-members of the target)."""

    name = "rmia"
    game = "membership"
    threat_model = frozenset({"query", "population", "training"})
    Params = RMIAParams
    params: RMIAParams

    def run(self, view: MembershipView) -> MembershipGuess:
        p = self.params
        pool = train_pool(view, p.shadows)
        n_pop = len(view.population_y)
        if p.z is not None and p.z > n_pop:
            raise ValueError(f"z = {p.z} population records requested, the population has {n_pop}")
        pick = np.sort(np.random.default_rng(view.seed).permutation(n_pop)[: p.z or n_pop])
        T = p.temperature

        x_target = true_class_log_prob(view.model.log_proba(view.challenge_X), view.challenge_y, T)
        x_refs = true_class_log_prob(pool.models.logits(view.challenge_X), view.challenge_y, T)
        if p.variant == "online":
            x_norm = log_mean_prob(x_refs, np.ones_like(pool.challenge_in))
        else:
            x_norm = offline_log_prob(log_mean_prob(x_refs, ~pool.challenge_in), p.a)

        # Population records are OUT for every reference; offline uses one shadow per pair, as many as a
        # challenge point has OUT references, online the whole pool.
        pop_refs = pool.models.logits(view.population_X)
        pop_refs = pop_refs if p.variant == "online" else pop_refs[0::2]
        pop_ratio = (true_class_log_prob(view.model.log_proba(view.population_X), view.population_y, T)
                     - offline_log_prob(log_mean_prob(true_class_log_prob(pop_refs, view.population_y, T),
                                                      np.ones(pop_refs.shape[:2], dtype=bool)), p.a))
        z_ratio = pop_ratio[pick]
        scores = rmia_scores(x_target - x_norm, z_ratio, p.gamma)
        reference = self._leave_one_out(pop_ratio, z_ratio, pick)
        threshold = float(np.quantile(reference, 1.0 - p.fpr))
        return MembershipGuess(scores=scores, decisions=scores > threshold)

    def _leave_one_out(self, pop_ratio: np.ndarray, z_ratio: np.ndarray, pick: np.ndarray) -> np.ndarray:
        """Every population record's score against Z, without comparing a record of Z with itself."""
        counts = rmia_scores(pop_ratio, z_ratio, self.params.gamma) * len(z_ratio)
        in_z = np.zeros(len(pop_ratio), dtype=bool)
        in_z[pick] = True
        self_counted = in_z & (self.params.gamma <= 1.0)  # LR(z, z) = 1 ≥ γ
        size = np.where(in_z, len(z_ratio) - 1, len(z_ratio))
        return np.where(size > 0, (counts - self_counted) / np.maximum(size, 1), 0.0)


@hookimpl
def register_attacks(register) -> None:  # noqa: ANN001
    register(RMIA)
