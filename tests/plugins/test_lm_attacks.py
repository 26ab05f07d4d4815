"""Each text attack's score on hand-made token probabilities equals its paper's formula, computed by hand here."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
import torch

from arena import PAD
from arena_plugins.lm_attacks import lowest_mean, mean_nll, min_k, min_k_plus_plus, token_stats, zlib_bytes

# Two records of 4 positions over a vocabulary of 3; the second record has one real next token less (PAD).
P = torch.tensor([
    [[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4], [0.5, 0.25, 0.25]],
    [[0.2, 0.2, 0.6], [0.9, 0.05, 0.05], [1 / 3, 1 / 3, 1 / 3], [0.6, 0.3, 0.1]],
], dtype=torch.float64)
X = torch.tensor([[2.0, 0, 1, 2, 0], [1.0, 2, 0, 1, PAD]])  # token t + 1 is what position t predicts


def _stats() -> tuple[np.ndarray, ...]:
    return token_stats(P.log(), X)


def test_token_log_probabilities_and_the_next_token_moments() -> None:
    own, mu, sigma, real = _stats()
    assert real.tolist() == [[True] * 4, [True, True, True, False]]
    assert own[0] == pytest.approx(np.log([0.7, 0.8, 0.4, 0.5]))
    assert own[1, :3] == pytest.approx(np.log([0.6, 0.9, 1 / 3]))
    # μ = Σ p log p and σ² = Σ p (log p)² − μ², by hand for position (0, 0): p = (0.7, 0.2, 0.1)
    p = np.array([0.7, 0.2, 0.1])
    m = float(np.sum(p * np.log(p)))
    assert mu[0, 0] == pytest.approx(m)
    assert sigma[0, 0] == pytest.approx(math.sqrt(float(np.sum(p * np.log(p) ** 2)) - m * m))
    assert sigma[1, 2] == pytest.approx(0.0, abs=1e-7)  # a uniform distribution: every log p is the same


def test_loss_is_the_mean_nll_over_real_tokens() -> None:
    own, _, _, real = _stats()
    assert mean_nll(own, real) == pytest.approx([
        -(math.log(0.7) + math.log(0.8) + math.log(0.4) + math.log(0.5)) / 4,
        -(math.log(0.6) + math.log(0.9) + math.log(1 / 3)) / 3,
    ])


def test_min_k_averages_the_lowest_k_percent_of_token_log_probabilities() -> None:
    own, _, _, real = _stats()
    # k = 0.5: ⌈0.5·4⌉ = 2 lowest of record 0 (0.4 and 0.5), ⌈0.5·3⌉ = 2 lowest of record 1 (1/3 and 0.6)
    assert min_k(own, real, 0.5) == pytest.approx([(math.log(0.4) + math.log(0.5)) / 2,
                                                  (math.log(1 / 3) + math.log(0.6)) / 2])
    # k = 0.1: at least one token, the lowest
    assert min_k(own, real, 0.1) == pytest.approx([math.log(0.4), math.log(1 / 3)])


def test_min_k_plus_plus_standardises_each_token_by_the_model_distribution() -> None:
    own, mu, sigma, real = _stats()
    z = []
    for probs, tok in zip(P[0].numpy(), [0, 1, 2, 0]):
        lp = np.log(probs)
        m = float(np.sum(probs * lp))
        s = math.sqrt(float(np.sum(probs * lp**2)) - m * m)
        z.append((lp[tok] - m) / s)
    lowest = sorted(z)[:2]
    assert min_k_plus_plus(own, mu, sigma, real, 0.5)[0] == pytest.approx(sum(lowest) / 2)
    assert min_k_plus_plus(own, mu, sigma, real, 1.0)[0] == pytest.approx(sum(z) / 4)


def test_lowest_mean_ignores_padding() -> None:
    values = np.array([[5.0, -9.0, 1.0]])
    assert lowest_mean(values, np.array([[True, False, True]]), 0.5) == pytest.approx([1.0])


def test_zlib_entropy_is_the_compressed_length() -> None:
    text = "abc abc abc abc"
    assert zlib_bytes(text) == len(zlib.compress(text.encode()))
