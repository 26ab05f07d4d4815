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
model's p ≈ 1 and a hopeless p ≈ 1e-30 both keep their precision. The formulas are ``arena``'s (``rmia_ratios``,
``rmia_scores``, ...), shared with ``arena evaluate-outputs``.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, PositiveInt

from arena import (
    Attack,
    MembershipGuess,
    MembershipView,
    PluginParams,
    hookimpl,
    rmia_ratios,
    rmia_scores,
    train_pool,
    true_class_log_prob,
)
from arena_plugins.membership import ShadowCount


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
        z_target = true_class_log_prob(view.model.log_proba(view.population_X), view.population_y, T)
        z_refs = true_class_log_prob(pool.models.logits(view.population_X), view.population_y, T)
        # Population records are OUT for every reference; offline uses one shadow per pair, as many as a
        # challenge point has OUT references, online the whole pool (``arena.rmia_ratios``).
        x_ratio, pop_ratio = rmia_ratios(x_target, x_refs, pool.challenge_in, z_target, z_refs, p.variant, p.a,
                                         paired=True)
        scores = rmia_scores(x_ratio, pop_ratio[pick], p.gamma)
        threshold = float(np.quantile(pop_ratio, 1.0 - p.fpr))
        return MembershipGuess(scores=scores, decisions=x_ratio > threshold, references=len(pick))


@hookimpl
def register_attacks(register) -> None:  # noqa: ANN001
    register(RMIA)

