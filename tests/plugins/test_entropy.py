"""Song & Mittal's modified-entropy attack: Mentr against its formula, the per-class threshold of highest shadow
accuracy, and the attack's score τ_y - Mentr on a hand-made pool."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import arena_plugins.entropy as entropy
from arena.games.membership.pools import ShadowPool
from arena_plugins.entropy import ModifiedEntropyMIA, _best_threshold, class_thresholds, modified_entropy


def test_modified_entropy_is_the_papers_formula() -> None:
    logits = torch.randn(2, 6, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 2
    y = torch.tensor([0, 1, 2, 3, 0, 1])
    p = torch.softmax(logits, -1).numpy()
    own = np.eye(4, dtype=bool)[y.numpy()]
    py = np.where(own, p, 0.0).sum(-1)
    others = np.where(own, 0.0, -p * np.log(1 - p)).sum(-1)
    assert np.allclose(modified_entropy(logits, y), -(1 - py) * np.log(py) + others, atol=1e-10)


def test_modified_entropy_is_finite_for_a_confident_model_and_lowest_when_right() -> None:
    logits = torch.tensor([[40.0, 0.0, 0.0]])
    right, wrong = modified_entropy(logits, torch.tensor([0])), modified_entropy(logits, torch.tensor([1]))
    assert np.isfinite(right).all() and np.isfinite(wrong).all() and right[0] < 1e-15 < wrong[0]
    # Label 1: -(1 - p_1) log p_1 ≈ 40, and the confident class 0 adds -p_0 log(1 - p_0) ≈ 40 - log 2.
    assert wrong[0] == pytest.approx(80.0 - np.log(2.0), rel=1e-9)


def test_the_threshold_maximises_shadow_accuracy() -> None:
    assert _best_threshold(np.array([1.0, 2.0, 3.0, 4.0]), np.array([True, True, False, False])) == 2.5
    assert _best_threshold(np.array([3.0, 1.0, 2.0]), np.array([False, False, False])) == 0.0, "all OUT: below all"
    # Equal values cannot be split: 2.0 is IN once and OUT once, the best cut leaves both on one side.
    t = _best_threshold(np.array([1.0, 2.0, 2.0, 5.0]), np.array([True, True, False, False]))
    assert t in (1.5, 3.5)
    tau = class_thresholds(np.array([1.0, 2.0, 5.0, 6.0, 0.5]), np.array([True, False, True, False, True]),
                           np.array([0, 0, 1, 1, 0]), 3)
    assert tau[0] == 1.5 and tau[1] == 5.5 and tau[2] == _best_threshold(
        np.array([1.0, 2.0, 5.0, 6.0, 0.5]), np.array([True, False, True, False, True])), "no values: pooled"


class Table:
    """A model whose logits are a table's rows for each query's id (X [n, 1] holds ids)."""

    def __init__(self, table: torch.Tensor) -> None:
        self.table = table

    def logits(self, X: torch.Tensor) -> torch.Tensor:
        return self.table[:, X[:, 0].long()]

    def log_proba(self, X: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.logits(X)[0], -1)


def test_the_score_is_the_class_threshold_minus_mentr(monkeypatch) -> None:
    gen = torch.Generator().manual_seed(2)
    shadows, target = torch.randn(4, 6, 3, generator=gen) * 3, torch.randn(1, 6, 3, generator=gen) * 3
    pool_in = np.array([[True, False] * 3, [False, True] * 3] * 2)
    monkeypatch.setattr(entropy, "train_pool", lambda view, k, data: ShadowPool(Table(shadows), pool_in))
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    view = SimpleNamespace(challenge_X=torch.arange(6.0)[:, None], challenge_y=y, n_classes=3, model=Table(target),
                           population_y=y, train_size=3)
    guess = ModifiedEntropyMIA(ModifiedEntropyMIA.Params(shadows=4)).run(view)
    values = modified_entropy(shadows, y)
    tau = [_best_threshold(values[:, y.numpy() == c].ravel(), pool_in[:, y.numpy() == c].ravel()) for c in range(3)]
    expected = np.array(tau)[y.numpy()] - modified_entropy(target, y)[0]
    assert np.allclose(guess.scores, expected) and guess.decisions.tolist() == (expected > 0).tolist()
