"""Built-in membership attacks: the loss / confidence threshold attack (Yeom et al.), the shadow-model attack
(Shokri et al. 2017) and the likelihood-ratio attack LiRA (Carlini et al. 2022).

The two shadow attacks share one pool of shadow models per game (``arena_plugins.shadows``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator
from scipy.special import log_ndtr
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from arena.attack import Attack, MembershipGuess
from arena.hookspecs import hookimpl
from arena_plugins.shadows import train_pool


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


def log_odds(logits: torch.Tensor) -> torch.Tensor:
    """log(p_j / (1 - p_j)) of every class j, float64 [..., C], from logits or log-probabilities [..., C].

    log(1 - p_j) is the log-sum-exp of the other classes' logits (minus the same normaliser as log p_j), so
    nothing is computed as ``1 - p``, which rounds to zero for a confident model.
    """
    z = logits.double()
    own = torch.eye(z.shape[-1], dtype=torch.bool, device=z.device)
    return z - torch.logsumexp(z.unsqueeze(-2).masked_fill(own, -math.inf), dim=-1)


def true_class_log_odds(logits: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """LiRA's statistic φ = log(p_y / (1 - p_y)) of the true class, float64 [...], computed as ``log_odds`` does;
    ``y`` [n] is shared by a leading model axis of ``logits`` [K, n, C]."""
    z = logits.double()
    idx = y.expand(z.shape[:-1]).unsqueeze(-1)
    others = z.scatter(-1, idx, -math.inf)
    return (z.gather(-1, idx).squeeze(-1) - torch.logsumexp(others, dim=-1)).numpy()


class ShadowParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    shadows: int = Field(default=16, ge=2, description="shadow models (even: they come in complementary pairs)")
    classifier: Literal["gboost", "mlp", "logistic"] = "gboost"
    per_class: bool = Field(default=True, description="one attack model per class (Shokri et al.); "
                            "else one model with the true label as a feature")
    fpr: float = Field(default=0.1, gt=0.0, lt=1.0, description="population FPR the hard threshold is set for")

    @field_validator("shadows")
    @classmethod
    def _even(cls, k: int) -> int:
        if k % 2:
            raise ValueError("must be even: shadows come in complementary pairs")
        return k


def attack_classifier(kind: str, seed: int):  # noqa: ANN201 - a scikit-learn classifier
    """The attack model: gradient-boosted trees, or a scaled MLP / logistic regression."""
    if kind == "gboost":
        return HistGradientBoostingClassifier(max_iter=100, random_state=seed)
    if kind == "mlp":
        return make_pipeline(StandardScaler(), MLPClassifier((64,), max_iter=500, random_state=seed))
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))


def attack_features(odds: np.ndarray, y: np.ndarray, n_classes: int, per_class: bool) -> np.ndarray:
    """Rows the attack model reads: the prediction vector as per-class log-odds, plus the one-hot true label
    when one model serves every class (a monotone transform of Shokri's probabilities: trees see the same
    information, linear models and MLPs a well-scaled one)."""
    if per_class:
        return odds
    return np.concatenate([odds, np.eye(n_classes)[y]], axis=-1)


class ShadowMIA(Attack):
    """Shokri et al.'s shadow-model attack: shadows trained like the target (defense included) on data the
    attacker chose, so it knows each shadow's members; an attack model learns IN vs OUT from the shadows'
    prediction vectors and then reads the target's. The hard threshold is set on population points (known
    non-members of the target) for a population FPR of ``fpr``."""

    name = "shadow-mia"
    threat_model = frozenset({"query", "population", "training"})
    Params = ShadowParams
    params: ShadowParams

    def run(self, view) -> MembershipGuess:  # noqa: ANN001
        p = self.params
        pool = train_pool(view, p.shadows)
        cy, py = view.challenge_y.numpy(), view.population_y.numpy()
        k = pool.challenge_in.shape[0]
        train_X = attack_features(log_odds(pool.models.logits(view.challenge_X)).numpy(), np.tile(cy, (k, 1)),
                                  view.n_classes, p.per_class)
        queries = [
            attack_features(log_odds(view.model.log_proba(X)).numpy(), y, view.n_classes, p.per_class)
            for X, y in ((view.challenge_X, cy), (view.population_X, py))
        ]
        scores, reference = np.full(len(cy), np.nan), np.full(len(py), np.nan)
        groups = np.unique(cy) if p.per_class else [None]
        for c in groups:
            shadow_rows = cy == c if p.per_class else slice(None)
            model = attack_classifier(p.classifier, view.seed % 2**32)
            model.fit(train_X[:, shadow_rows].reshape(-1, train_X.shape[-1]),
                      pool.challenge_in[:, shadow_rows].reshape(-1))
            for out, features, labels in ((scores, queries[0], cy), (reference, queries[1], py)):
                rows = labels == c if p.per_class else slice(None)
                if np.any(rows):
                    out[rows] = model.predict_proba(features[rows])[:, 1]
        threshold = float(np.quantile(reference[~np.isnan(reference)], 1.0 - p.fpr))
        return MembershipGuess(scores=scores, decisions=scores > threshold)


MIN_STD = 1e-6
"""Floor on a fitted standard deviation, so a point every shadow scores alike still gets a finite density."""


@dataclass(frozen=True)
class Gaussians:
    """One normal distribution per challenge point (means and standard deviations [n])."""

    mean: np.ndarray
    std: np.ndarray

    def logpdf(self, x: np.ndarray) -> np.ndarray:
        z = (x - self.mean) / self.std
        return -0.5 * z * z - np.log(self.std) - 0.5 * math.log(2 * math.pi)

    def logcdf(self, x: np.ndarray) -> np.ndarray:
        return log_ndtr((x - self.mean) / self.std)


def fit_gaussians(values: np.ndarray, mask: np.ndarray, fixed_variance: bool) -> Gaussians:
    """Per column of ``values`` [K, n]: the maximum-likelihood normal of the entries where ``mask`` is True.
    With ``fixed_variance`` every column shares one variance, pooled from all columns' residuals (LiRA's choice
    when there are few shadows per point)."""
    counts = mask.sum(axis=0)
    if np.any(counts == 0):
        raise ValueError("every point needs at least one shadow value to fit a Gaussian")
    mean = np.where(mask, values, 0.0).sum(axis=0) / counts
    squares = np.where(mask, (values - mean) ** 2, 0.0)
    var = np.full(values.shape[1], squares.sum() / counts.sum()) if fixed_variance else squares.sum(axis=0) / counts
    return Gaussians(mean, np.maximum(np.sqrt(var), MIN_STD))


class LiRAParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    shadows: int = Field(default=64, ge=4, description="shadow models; each challenge point is IN for half")
    variant: Literal["online", "offline"] = "online"
    fixed_variance: bool = Field(default=False, description="one variance for all points (few shadows)")
    fpr: float = Field(default=0.1, gt=0.0, lt=1.0,
                       description="offline: population FPR the hard threshold is set for")

    @field_validator("shadows")
    @classmethod
    def _even(cls, k: int) -> int:
        if k % 2:
            raise ValueError("must be even: shadows come in complementary pairs")
        return k


class LiRA(Attack):
    """Carlini et al.'s likelihood-ratio attack on φ = log(p_y / (1 - p_y)).

    Online: per challenge point, normals fitted to φ over the shadows that trained on it (IN) and those that
    did not (OUT); score log N(φ; IN) - log N(φ; OUT), member when positive. Offline: the one-sided test
    log Pr[Z ≤ φ], Z ~ OUT, thresholded at the (1 - ``fpr``) quantile of the same score on population points
    (non-members of the target, OUT for every shadow; fitted on one shadow per pair, as many as a challenge
    point's OUT shadows)."""

    name = "lira"
    threat_model = frozenset({"query", "population", "training"})
    Params = LiRAParams
    params: LiRAParams

    def run(self, view) -> MembershipGuess:  # noqa: ANN001
        p = self.params
        pool = train_pool(view, p.shadows)
        shadow_phi = true_class_log_odds(pool.models.logits(view.challenge_X), view.challenge_y)
        phi = true_class_log_odds(view.model.log_proba(view.challenge_X), view.challenge_y)
        out = fit_gaussians(shadow_phi, ~pool.challenge_in, p.fixed_variance)
        if p.variant == "online":
            scores = fit_gaussians(shadow_phi, pool.challenge_in, p.fixed_variance).logpdf(phi) - out.logpdf(phi)
            return MembershipGuess(scores=scores, decisions=scores > 0.0)
        scores = out.logcdf(phi)
        pop_shadow_phi = true_class_log_odds(pool.models.logits(view.population_X)[0::2], view.population_y)
        pop_out = fit_gaussians(pop_shadow_phi, np.ones_like(pop_shadow_phi, dtype=bool), p.fixed_variance)
        reference = pop_out.logcdf(true_class_log_odds(view.model.log_proba(view.population_X), view.population_y))
        threshold = float(np.quantile(reference, 1.0 - p.fpr))
        return MembershipGuess(scores=scores, decisions=scores > threshold)


@hookimpl
def register_attacks(register) -> None:  # noqa: ANN001
    register(ThresholdMIA)
    register(ShadowMIA)
    register(LiRA)
