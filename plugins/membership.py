"""Built-in membership attacks: the loss / confidence threshold attack (Yeom et al.), the shadow-model attack
(Shokri et al. 2017) and the likelihood-ratio attack LiRA (Carlini et al. 2022).

LiRA's formulas are ``arena``'s (``likelihood_ratio``, ``one_sided_out``, ...), shared with ``arena evaluate-outputs``.
The two shadow attacks share one pool of shadow models per game (``arena.train_pool``).
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
import torch
from pydantic import AfterValidator, Field
from threadpoolctl import threadpool_limits

from arena import (
    Attack,
    MembershipGuess,
    MembershipView,
    PluginParams,
    PoolData,
    hookimpl,
    likelihood_ratio,
    log_odds,
    one_sided_out,
    population_references,
    train_pool,
    true_class_log_odds,
)
from arena_plugins.queries import augmented_queries


class ThresholdParams(PluginParams):
    signal: Literal["loss", "confidence"] = "loss"
    fpr: float = Field(default=0.1, strict=True, gt=0.0, lt=1.0,
                       description="FPR the hard threshold is calibrated for")


def threshold_signal(model, X: torch.Tensor, y: torch.Tensor, signal: str) -> np.ndarray:  # noqa: ANN001
    """Higher means more member-like: negative loss, or the top predicted probability."""
    if signal == "loss":
        return (-model.loss(X, y)).double().numpy()
    return model.predict_proba(X).max(dim=-1).values.double().numpy()


class ThresholdMIA(Attack):
    """Yeom et al.'s attack: members have lower loss. The hard threshold is set on the attacker's population data
    (known non-members) so that the population's false-positive rate is ``fpr``; challenge labels are never used."""

    name = "threshold-mia"
    game = "membership"
    threat_model = frozenset({"query", "population"})
    Params = ThresholdParams
    params: ThresholdParams

    def run(self, view: MembershipView) -> MembershipGuess:
        scores = threshold_signal(view.model, view.challenge_X, view.challenge_y, self.params.signal)
        reference = threshold_signal(view.model, view.population_X, view.population_y, self.params.signal)
        threshold = float(np.quantile(reference, 1.0 - self.params.fpr))
        return MembershipGuess(scores=scores, decisions=scores > threshold)


def _even(k: int) -> int:
    if k % 2:
        raise ValueError("must be even: shadows come in complementary pairs")
    return k


ShadowCount = Annotated[int, AfterValidator(_even)]
"""A number of shadow models: even, because the pool trains them in complementary pairs."""


class ShadowParams(PluginParams):
    shadows: ShadowCount = Field(default=16, strict=True, ge=2, le=100_000, description="shadow models (even)")
    classifier: Literal["gboost", "mlp", "logistic"] = "gboost"
    per_class: bool = Field(default=True, description="one attack model per class (Shokri et al.); "
                            "else one model with the true label as a feature")
    fpr: float = Field(default=0.1, strict=True, gt=0.0, lt=1.0,
                       description="population FPR the hard threshold is set for")
    data: PoolData = Field(default="challenge", description="what the shadows train on: halves of the challenge "
                           "set (LiRA's pool, shared with lira and rmia), or of the population, disjoint from the "
                           "challenge (Shokri et al.'s own threat model)")


def attack_classifier(kind: str, seed: int):  # noqa: ANN201 - a scikit-learn classifier
    """The attack model: gradient-boosted trees, or a scaled MLP / logistic regression (scikit-learn, imported
    here: it takes 0.4 s, and every arena process registers this plugin)."""
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

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
    non-members of the target) for a population FPR of ``fpr``.

    ``data: challenge`` trains the shadows on halves of the challenge set and the attack model on their
    predictions on the challenge points themselves. ``data: population`` is Shokri et al.'s own setting: shadows
    on halves of the population (disjoint from the challenge), the attack model on their predictions on those
    population records, then applied to the target's predictions on the challenge. Either way each shadow
    contributes its own training records (IN) and its pair partner's (OUT), as many of each, like Shokri's
    shadow training and test sets."""

    name = "shadow-mia"
    game = "membership"
    threat_model = frozenset({"query", "population", "training"})
    Params = ShadowParams
    params: ShadowParams

    def run(self, view: MembershipView) -> MembershipGuess:
        p = self.params
        cy, py = view.challenge_y.numpy(), view.population_y.numpy()
        if p.data == "population" and len(py) < 2 * view.train_size:
            raise ValueError(f"data: population needs at least {2 * view.train_size} population records (two "
                             f"halves of {view.train_size}), got {len(py)}")
        pool = train_pool(view, p.shadows, p.data)
        shadow_X, shadow_y = (view.challenge_X, cy) if p.data == "challenge" else (view.population_X, py)
        shadow_features = attack_features(log_odds(pool.models.logits(shadow_X)).numpy(),
                                          np.broadcast_to(shadow_y, pool.challenge_in.shape), view.n_classes,
                                          p.per_class)
        shadow_group = np.broadcast_to(shadow_y if p.per_class else np.zeros_like(shadow_y), pool.challenge_in.shape)
        labelled = pool.challenge_in | pool.challenge_in[np.arange(p.shadows) ^ 1]  # own IN, partner's IN as OUT
        challenge_features, population_features = (
            attack_features(log_odds(view.model.log_proba(X)).numpy(), y, view.n_classes, p.per_class)
            for X, y in ((view.challenge_X, cy), (view.population_X, py))
        )
        challenge_group = cy if p.per_class else np.zeros_like(cy)
        population_group = py if p.per_class else np.zeros_like(py)
        scores, reference = np.full(len(cy), np.nan), np.full(len(py), np.nan)
        with threadpool_limits(1):  # one matchup per core: OpenMP threads in every worker would thrash
            for group in np.unique(challenge_group):
                rows, pop_rows = challenge_group == group, population_group == group
                model = attack_classifier(p.classifier, view.seed % 2**32)
                train = labelled & (shadow_group == group)
                model.fit(shadow_features[train], pool.challenge_in[train])
                scores[rows] = model.predict_proba(challenge_features[rows])[:, 1]
                if pop_rows.any():
                    reference[pop_rows] = model.predict_proba(population_features[pop_rows])[:, 1]
        threshold = float(np.nanquantile(reference, 1.0 - p.fpr))
        return MembershipGuess(scores=scores, decisions=scores > threshold)


class LiRAParams(PluginParams):
    shadows: ShadowCount = Field(default=64, strict=True, ge=4, le=100_000,
                                 description="shadow models (even); each point is IN for half")
    variant: Literal["online", "offline"] = "online"
    fixed_variance: bool = Field(default=False, description="one variance for all points (few shadows)")
    fpr: float = Field(default=0.1, strict=True, gt=0.0, lt=1.0,
                       description="offline: population FPR the hard threshold is set for")
    mirror: bool = Field(default=False, description="also query each image mirrored left-right")
    shift: int = Field(default=0, ge=0, le=8, description="also query each image shifted by this many pixels "
                       "up, down, left and right (each mirrored too with mirror)")


class LiRA(Attack):
    """Carlini et al.'s likelihood-ratio attack on φ = log(p_y / (1 - p_y)).

    Online: per challenge point, normals fitted to φ over the shadows that trained on it (IN) and those that
    did not (OUT); score log N(φ; IN) - log N(φ; OUT), member when positive. Offline: the one-sided test
    log Pr[Z ≤ φ], Z ~ OUT, thresholded at the (1 - ``fpr``) quantile of the same score on population points
    (non-members of the target, OUT for every shadow; fitted on one shadow per pair, as many as a challenge
    point's OUT shadows).

    With ``mirror``/``shift`` (image data) the target and every shadow are queried on each augmented view of a
    point and the per-view scores are averaged, as in Carlini et al.'s reference code."""

    name = "lira"
    game = "membership"
    threat_model = frozenset({"query", "population", "training"})
    Params = LiRAParams
    params: LiRAParams

    def run(self, view: MembershipView) -> MembershipGuess:
        p = self.params
        pool = train_pool(view, p.shadows)
        views = augmented_queries(view.challenge_X, view.input_shape, p.mirror, p.shift)
        shadow_phi = [true_class_log_odds(pool.models.logits(X), view.challenge_y) for X in views]
        phi = [true_class_log_odds(view.model.log_proba(X), view.challenge_y) for X in views]
        if p.variant == "online":
            scores = np.mean([likelihood_ratio(s, pool.challenge_in, f, p.fixed_variance)
                              for s, f in zip(shadow_phi, phi)], axis=0)
            return MembershipGuess(scores=scores, decisions=scores > 0.0)
        scores = np.mean([one_sided_out(s, ~pool.challenge_in, f, p.fixed_variance)
                          for s, f in zip(shadow_phi, phi)], axis=0)
        reference = np.mean([self._population_scores(view, pool, X) for X in
                             augmented_queries(view.population_X, view.input_shape, p.mirror, p.shift)], axis=0)
        threshold = float(np.quantile(reference, 1.0 - p.fpr))
        return MembershipGuess(scores=scores, decisions=scores > threshold)

    def _population_scores(self, view, pool, X) -> np.ndarray:  # noqa: ANN001
        """Offline scores of population points (non-members of the target, OUT for every shadow) under one query."""
        pop_shadow_phi = true_class_log_odds(pool.models.logits(X)[population_references(pool.challenge_in, True)],
                                             view.population_y)
        pop_phi = true_class_log_odds(view.model.log_proba(X), view.population_y)
        out = np.ones_like(pop_shadow_phi, dtype=bool)
        return one_sided_out(pop_shadow_phi, out, pop_phi, self.params.fixed_variance)


@hookimpl
def register_attacks(register) -> None:  # noqa: ANN001
    register(ThresholdMIA)
    register(ShadowMIA)
    register(LiRA)

