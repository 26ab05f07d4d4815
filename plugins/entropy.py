"""The modified-entropy attack of Song & Mittal, "Systematic Evaluation of Privacy Risks of Machine Learning
Models" (USENIX Security 2021): the metric attack that defense papers (MemGuard's successors, SELENA, RelaxLoss,
HAMP, MixupMMD, DMP) report against, so that their tables can be replayed on the board.

Mentr(p, y) = -(1 - p_y) log p_y - Σ_{i≠y} p_i log(1 - p_i) is low where the model is confident in the true
label and in no other; members have lower values. Song & Mittal set one threshold per class, τ_y, the one that
best separates the shadow models' training records (IN) from their test records (OUT) of that class (highest
accuracy); a record is a member when Mentr < τ_y. The shadows are the shared pool (``arena.train_pool``), whose
complementary pairs give every class as many IN as OUT values.
"""

from __future__ import annotations

import numpy as np
import torch
from pydantic import Field

from arena import Attack, MembershipGuess, MembershipView, PluginParams, PoolData, hookimpl, train_pool
from arena_plugins.membership import ShadowCount, log_odds


def modified_entropy(logits: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """Mentr per record, float64 [..., n], from logits or log-probabilities [..., n, C] (``y`` [n] shared by
    leading axes); log(1 - p_i) is log p_i - log(p_i / (1 - p_i)), never computed as 1 - p."""
    log_p = torch.log_softmax(logits.double(), dim=-1)
    log_q = log_p - log_odds(log_p)  # log(1 - p_i)
    p, q = log_p.exp(), (-log_odds(log_p)).sigmoid()  # p_i and 1 - p_i
    own = torch.nn.functional.one_hot(y, log_p.shape[-1]).bool().expand(log_p.shape)
    terms = torch.where(own, -q * log_p, -p * log_q)
    return terms.sum(dim=-1).numpy()


def class_thresholds(values: np.ndarray, member: np.ndarray, labels: np.ndarray, n_classes: int) -> np.ndarray:
    """τ_c per class: the threshold t (member when value < t) of highest accuracy on that class's shadow
    values [N] with their IN/OUT labels, among the midpoints between consecutive sorted values and the two
    ends; ties go to the smallest t. A class without shadow values gets the threshold of all values pooled."""
    pooled = _best_threshold(values, member)
    return np.array([_best_threshold(values[labels == c], member[labels == c]) if np.any(labels == c) else pooled
                     for c in range(n_classes)])


def _best_threshold(values: np.ndarray, member: np.ndarray) -> float:
    order = np.argsort(values, kind="stable")
    v, m = values[order], member[order]
    cuts = np.concatenate([[v[0] - 1.0], (v[:-1] + v[1:]) / 2, [v[-1] + 1.0]])
    below_in = np.concatenate([[0], np.cumsum(m)])  # IN values below each cut (sorted, so the first k)
    below_out = np.concatenate([[0], np.cumsum(~m)])
    correct = below_in + (below_out[-1] - below_out)  # IN below the cut + OUT at or above it
    distinct = np.concatenate([[True], v[1:] > v[:-1], [True]])  # a cut between equal values splits nothing
    return float(cuts[np.argmax(np.where(distinct, correct, -1))])


class EntropyParams(PluginParams):
    shadows: ShadowCount = Field(default=8, strict=True, ge=2, le=100_000, description="shadow models (even)")
    data: PoolData = Field(default="challenge", description="what the shadows train on: halves of the challenge "
                           "set (the shared pool) or of the population")


class ModifiedEntropyMIA(Attack):
    """Song & Mittal's modified-entropy attack with class-dependent thresholds from shadow models (module
    docstring). Score τ_y - Mentr(x, y): positive means member (the paper's decision)."""

    name = "mentr"
    game = "membership"
    threat_model = frozenset({"query", "population", "training"})
    Params = EntropyParams
    params: EntropyParams

    def run(self, view: MembershipView) -> MembershipGuess:
        p = self.params
        if p.data == "population" and len(view.population_y) < 2 * view.train_size:
            raise ValueError(f"data: population needs at least {2 * view.train_size} population records (two "
                             f"halves of {view.train_size}), got {len(view.population_y)}")
        pool = train_pool(view, p.shadows, p.data)
        X, y = (view.challenge_X, view.challenge_y) if p.data == "challenge" else (view.population_X,
                                                                                   view.population_y)
        shadow = modified_entropy(pool.models.logits(X), y)  # [K, N]
        labels = np.broadcast_to(y.numpy(), shadow.shape)
        tau = class_thresholds(shadow.ravel(), pool.challenge_in.ravel(), labels.ravel(), view.n_classes)
        cy = view.challenge_y
        scores = tau[cy.numpy()] - modified_entropy(view.model.log_proba(view.challenge_X), cy)
        return MembershipGuess(scores=scores, decisions=scores > 0)


@hookimpl
def register_attacks(register) -> None:  # noqa: ANN001
    register(ModifiedEntropyMIA)
