"""Adaptive membership attacks, one per built-in empirical defense (Aerni, Zhang & Tramèr, "Evaluations of Machine
Learning Privacy Defenses are Misleading", CCS 2024, §5): the attack knows the defense, trains its shadows with it
(``arena.train_pool`` trains them with the target's own procedure, defense and answering included) and reads a
signal that the defense does not mask. Each declares the defense it is designed against in ``adapts_to``.

Every one is an online likelihood-ratio test per challenge record over the shadows that did (IN) and did not (OUT)
train on it (Carlini et al.'s LiRA); they differ in the signal:

- ``labels`` (``adaptive-memguard``, ``adaptive-hamp``): the defense rewrites the confidences at answering time
  but keeps every predicted label (MemGuard's noise never changes the argmax; HAMP's answers keep the query's own
  class ranking), so the attack queries the record and its perturbations (label-only's set: the record, its 4d
  translations at L1 distance exactly d for images, Gaussian-noise copies) and reads only whether each predicted
  label is the true one. Per (record, query), c ∈ {0, 1}; the IN and OUT shadows' rates of c = 1, add-one
  smoothed, p = (Σ c + 1)/(count + 2); the score is Σ_q log(P_IN(c_q)/P_OUT(c_q)) over the queries (Bernoulli
  likelihood ratio, queries taken as independent). Aerni et al. attack HAMP with label-only features of augmented
  queries, per-record classifiers trained on shadows; this is that attack with a naive-Bayes classifier.
- ``hinge`` (``adaptive-relaxloss``, ``adaptive-adv-reg``): z_y − max_{j≠y} z_j on the answered log-probabilities
  (Carlini et al.'s hinge; Aerni et al. use it with LiRA against RelaxLoss, whose posterior flattening evens the
  non-true classes so that the logit-scaled confidence loses resolution while the margin keeps it).
- ``logit`` (``adaptive-selena``, ``adaptive-dmp``): LiRA's φ = log(p_y/(1 − p_y)). For distillation defenses the
  adaptation is the shadows: each is trained with the whole defense (Split-AI then self-distillation for SELENA;
  teacher then student for DMP), so that the IN/OUT distributions are those of defended models.

``mirror``/``shift`` add LiRA's augmented queries (per-query scores averaged) to the confidence signals.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
import torch
from pydantic import Field

from arena import Attack, MembershipGuess, MembershipView, PluginParams, hookimpl, train_pool
from arena_plugins.label_only import LabelOnlyParams, perturbations
from arena_plugins.membership import ShadowCount, likelihood_ratio, true_class_log_odds
from arena_plugins.queries import augmented_queries

Signal = Literal["labels", "hinge", "logit"]


class AdaptiveParams(PluginParams):
    shadows: ShadowCount = Field(default=16, strict=True, ge=4, le=100_000,
                                 description="shadows trained with the defense (even); each record is IN for half")
    fixed_variance: bool = Field(default=True, description="confidence signals: one variance for all records")
    mirror: bool = Field(default=False, description="confidence signals: also query each image mirrored")
    shift: int = Field(default=0, ge=0, le=8, description="confidence signals: also query each image shifted by "
                       "this many pixels up, down, left and right")
    label_shift: int = Field(default=1, ge=0, le=8, description="labels signal: the translations at L1 distance "
                             "exactly this many pixels")
    sigma: float = Field(default=0.1, ge=0.0, le=10.0, allow_inf_nan=False,
                         description="labels signal: standard deviation of the Gaussian-noise queries")
    draws: int = Field(default=16, ge=0, le=1000, description="labels signal: Gaussian-noise copies per record")


def hinge(log_probs: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """z_y − max_{j≠y} z_j, float64 [...], for logits or log-probabilities [..., n, C] (the same either way) and
    labels ``y`` [n] shared by any leading model axis."""
    z = log_probs.double()
    idx = y.expand(z.shape[:-1]).unsqueeze(-1)
    return (z.gather(-1, idx).squeeze(-1) - z.scatter(-1, idx, -torch.inf).amax(-1)).numpy()


def bernoulli_ratio(shadow_correct: np.ndarray, shadow_in: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """The labels signal's score per record: Σ_q log(P_IN(c_q)/P_OUT(c_q)) for the target's bits ``correct``
    [Q, n], with P(c = 1) = (Σ c + 1)/(count + 2) over the shadows' bits ``shadow_correct`` [Q, K, n] where
    ``shadow_in`` [K, n] (IN) or not (OUT)."""
    def rate(mask: np.ndarray) -> np.ndarray:
        return (np.where(mask, shadow_correct, 0).sum(axis=1) + 1.0) / (mask.sum(axis=0) + 2.0)

    p_in, p_out = rate(shadow_in), rate(~shadow_in)
    c = correct.astype(bool)
    return np.where(c, np.log(p_in) - np.log(p_out), np.log1p(-p_in) - np.log1p(-p_out)).sum(axis=0)


class AdaptiveMIA(Attack):
    """An adaptive attack (module docstring): LiRA-style test over shadows trained with the defense, on the
    defense's unmasked ``signal``. Scores: log-likelihood ratios, member when positive."""

    game = "membership"
    signal: ClassVar[Signal]
    Params = AdaptiveParams
    params: AdaptiveParams

    def run(self, view: MembershipView) -> MembershipGuess:
        p = self.params
        pool = train_pool(view, p.shadows)
        X, y = view.challenge_X, view.challenge_y
        if self.signal == "labels":
            queries = perturbations(X, view.input_shape, LabelOnlyParams(shift=p.label_shift, sigma=p.sigma,
                                                                         draws=p.draws), view.seed)
            flat = queries.reshape(-1, X.shape[1])
            correct = (view.labels_model.predict(flat).reshape(queries.shape[:2]) == y).numpy()
            shadow = (pool.models.labels(flat).reshape(-1, *queries.shape[:2]) == y)  # [K, Q, n]
            scores = bernoulli_ratio(shadow.transpose(0, 1).numpy(), pool.challenge_in, correct)
            return MembershipGuess(scores=scores, decisions=scores > 0.0)
        stat = hinge if self.signal == "hinge" else true_class_log_odds
        scores = np.mean([likelihood_ratio(stat(pool.models.logits(Q), y), pool.challenge_in,
                                           stat(view.model.log_proba(Q), y), p.fixed_variance)
                          for Q in augmented_queries(X, view.input_shape, p.mirror, p.shift)], axis=0)
        return MembershipGuess(scores=scores, decisions=scores > 0.0)


class AdaptiveMemGuard(AdaptiveMIA):
    """Against MemGuard: its noise perturbs confidences only, never the label, so the attack reads labels of
    perturbed queries, with shadows answering through their own MemGuard."""

    name = "adaptive-memguard"
    adapts_to = frozenset({"memguard"})
    signal = "labels"
    threat_model = frozenset({"labels", "training"})


class AdaptiveHAMP(AdaptiveMIA):
    """Against HAMP: its answers carry a random input's scores in the query's own class ranking, so the attack
    reads labels of augmented and noisy queries (Aerni et al.'s HAMP attack), shadows trained with HAMP."""

    name = "adaptive-hamp"
    adapts_to = frozenset({"hamp"})
    signal = "labels"
    threat_model = frozenset({"labels", "training"})


class AdaptiveRelaxLoss(AdaptiveMIA):
    """Against RelaxLoss: LiRA on the hinge, which its posterior flattening does not even out (Aerni et al.)."""

    name = "adaptive-relaxloss"
    adapts_to = frozenset({"relaxloss"})
    signal = "hinge"
    threat_model = frozenset({"query", "training"})


class AdaptiveAdvReg(AdaptiveMIA):
    """Against adversarial regularisation: LiRA on the hinge with shadows trained by the min-max game (Aerni et al.
    do not study it; LiRA with defended shadows is the default adaptive attack)."""

    name = "adaptive-adv-reg"
    adapts_to = frozenset({"adv-reg"})
    signal = "hinge"
    threat_model = frozenset({"query", "training"})


class AdaptiveSELENA(AdaptiveMIA):
    """Against SELENA: LiRA with shadows that run the whole defense, Split-AI's random membership and the
    self-distillation included (Aerni et al.'s SELENA evaluation)."""

    name = "adaptive-selena"
    adapts_to = frozenset({"selena"})
    signal = "logit"
    threat_model = frozenset({"query", "training"})


class AdaptiveDMP(AdaptiveMIA):
    """Against DMP: LiRA with shadows that run teacher and student (not in Aerni et al.; LiRA with defended shadows
    is the default adaptive attack)."""

    name = "adaptive-dmp"
    adapts_to = frozenset({"dmp"})
    signal = "logit"
    threat_model = frozenset({"query", "training"})


ADAPTIVE = (AdaptiveMemGuard, AdaptiveHAMP, AdaptiveRelaxLoss, AdaptiveAdvReg, AdaptiveSELENA, AdaptiveDMP)


@hookimpl
def register_attacks(register) -> None:  # noqa: ANN001
    for attack in ADAPTIVE:
        register(attack)
