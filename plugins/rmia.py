"""RMIA, the relative membership inference attack of Zarifzadeh, Liu, Cheng & Shokri, "Low-Cost High-Power
Membership Inference Attacks" (ICML 2024), on the shared shadow pool (``arena.train_pool``).

The signal is Pr(x|θ), the target's probability of x's true label (softmax of the logits at a temperature T,
the paper's signal for classifiers). RMIA tests x against many population records z at once:

- Pr(x) = E_θ' Pr(x|θ') over reference models θ' (the paper's normaliser of Eq. 3), i.e. ½(Pr_IN + Pr_OUT) when
  half the references trained on x. Online, Pr_IN(x) and Pr_OUT(x) are the means over the shadows that did and
  did not train on x (each challenge point is IN for exactly half of them). Offline, only the OUT references are
  used and Pr(x) = ½((1 + a)·Pr_OUT(x) + (1 - a)): the paper's linear approximation Pr_IN ≈ a·Pr_OUT + (1 - a) of
  the missing IN models (Appendix, "offline RMIA").
- LR_θ(x, z) = (Pr(x|θ) / Pr(x)) / (Pr(z|θ) / Pr(z))  (Eq. 3).
- Score_MIA(x; θ) = Pr_z(LR_θ(x, z) ≥ γ), the fraction of the population sample Z with LR ≥ γ  (Eq. 4).

Population records are outside every reference model (the pool trains on the challenge set only), so their
Pr(z) comes from the ``a`` approximation in both variants. Online, ``a`` is fitted on the pool's challenge
points, which have both IN and OUT references (least squares of 1 − Pr_IN = a·(1 − Pr_OUT), ``fit_a``), so that
z's Pr(z) estimates the same ½(Pr_IN + Pr_OUT) as x's; a fixed a (0.3 by default) floors Pr(z) at (1 − a)/2
while Pr(x) of a hard point falls far below it, which lifts the ratios of hard non-members above every z's.

Eq. 4's fraction takes only |Z| + 1 values, so points tie: many non-members share the top score and a TPR at
an FPR below that share is 0 by construction. The score reported breaks ties by the likelihood ratio itself:
(c + u)/(|Z| + 1), with c the paper's count and u ∈ [0, 1) the position of log LR between the neighbouring
population ratios (``rmia_scores``): a continuous, strictly increasing function of Pr(x|θ)/Pr(x) whose integer
part is the count. |Z| is reported with the guess. Everything is computed on log probabilities, so a confident
model's p ≈ 1 and a hopeless p ≈ 1e-30 both keep their precision.
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


def fit_a(log_p_in: np.ndarray, log_p_out: np.ndarray) -> float:
    """The a of Pr_IN ≈ a·Pr_OUT + (1 − a) that fits the points best (least squares of 1 − Pr_IN = a·(1 − Pr_OUT)
    through the origin: a = Σ(1 − Pr_OUT)(1 − Pr_IN) / Σ(1 − Pr_OUT)²), in [0, 1]; 1 where Pr_OUT = 1 throughout."""
    gap_in, gap_out = -np.expm1(log_p_in), -np.expm1(log_p_out)
    norm = float(np.sum(gap_out**2))
    return 1.0 if norm == 0 else float(np.clip(np.sum(gap_out * gap_in) / norm, 0.0, 1.0))


def rmia_counts(log_ratio_x: np.ndarray, log_ratio_z: np.ndarray, gamma: float) -> np.ndarray:
    """|{z : LR(x, z) ≥ γ}| for each x (Eq. 4 times |Z|), given log(Pr(x|θ)/Pr(x)) [n] and log(Pr(z|θ)/Pr(z)) [m]:
    LR(x, z) ≥ γ ⇔ log ratio_z ≤ log ratio_x − log γ, counted by binary search."""
    return np.searchsorted(np.sort(log_ratio_z), log_ratio_x - math.log(gamma), side="right")


def rmia_scores(log_ratio_x: np.ndarray, log_ratio_z: np.ndarray, gamma: float) -> np.ndarray:
    """Eq. 4 with ties broken by the likelihood ratio: (c + u)/(|Z| + 1) for each x, c = ``rmia_counts`` and, with
    t = log ratio_x − log γ between the sorted population ratios z₍c₎ ≤ t < z₍c₊₁₎, u = (t − z₍c₎)/(z₍c₊₁₎ − z₍c₎);
    below every z, u = exp(t − z₍₁₎); above every z, u = 1 − exp(z₍|Z|₎ − t). Continuous and strictly increasing
    in t, in [0, 1); its integer part (times |Z| + 1) is the count."""
    z = np.sort(log_ratio_z)
    m, t = len(z), log_ratio_x - math.log(gamma)
    c = np.searchsorted(z, t, side="right")
    lo, hi = z[np.maximum(c - 1, 0)], z[np.minimum(c, m - 1)]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        inner = (t - lo) / (hi - lo)
        u = np.where(c == 0, np.exp(t - z[0]), np.where(c == m, -np.expm1(z[-1] - t), inner))
    return (c + np.clip(u, 0.0, np.nextafter(1.0, 0.0))) / (m + 1)


class RMIAParams(PluginParams):
    shadows: ShadowCount = Field(default=4, ge=2, description="reference models (even; complementary pairs)")
    variant: Literal["online", "offline"] = "online"
    gamma: float = Field(default=1.0, gt=0.0, allow_inf_nan=False, description="threshold γ on LR(x, z)")
    a: float | None = Field(default=None, ge=0.0, le=1.0,
                            description="the approximation Pr_IN ≈ a·Pr_OUT + (1 - a) for points outside every "
                                        "reference model; None: fitted on the pool online, 0.3 offline (ML "
                                        "Privacy Meter's default)")
    z: PositiveInt | None = Field(default=None, description="population records z drawn for Z (None: all)")
    temperature: float = Field(default=1.0, gt=0.0, allow_inf_nan=False, description="softmax temperature T")
    fpr: float = Field(default=0.1, gt=0.0, lt=1.0, description="population FPR the hard threshold is set for")


class RMIA(Attack):
    """Zarifzadeh et al.'s RMIA (Eq. 3-4): x is a member when its probability ratio Pr(x|θ)/Pr(x) beats that of
    many population records z. Z is ``z`` population records drawn with the attack's seed; a point is called a
    member when its ratio beats the (1 − ``fpr``) quantile of the population records' ratios (population records
    are non-members of the target; the score is increasing in the ratio, so this is the score's threshold)."""

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
        x_out = log_mean_prob(x_refs, ~pool.challenge_in)
        if p.variant == "online":
            x_in = log_mean_prob(x_refs, pool.challenge_in)
            x_norm = np.logaddexp(x_in, x_out) - math.log(2.0)  # ½(Pr_IN + Pr_OUT)
            a = fit_a(x_in, x_out) if p.a is None else p.a
        else:
            a = 0.3 if p.a is None else p.a
            x_norm = offline_log_prob(x_out, a)

        # Population records are OUT for every reference; offline uses one shadow per pair, as many as a
        # challenge point has OUT references, online the whole pool.
        pop_refs = pool.models.logits(view.population_X)
        pop_refs = pop_refs if p.variant == "online" else pop_refs[0::2]
        pop_ratio = (true_class_log_prob(view.model.log_proba(view.population_X), view.population_y, T)
                     - offline_log_prob(log_mean_prob(true_class_log_prob(pop_refs, view.population_y, T),
                                                      np.ones(pop_refs.shape[:2], dtype=bool)), a))
        x_ratio = x_target - x_norm
        scores = rmia_scores(x_ratio, pop_ratio[pick], p.gamma)
        threshold = float(np.quantile(pop_ratio, 1.0 - p.fpr))
        return MembershipGuess(scores=scores, decisions=x_ratio > threshold, references=len(pick))


@hookimpl
def register_attacks(register) -> None:  # noqa: ANN001
    register(RMIA)
