"""Canary exposure: rank and bits on hand-made losses, a toy model's candidate losses summed by hand, and the
canaries' records and copies."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from arena import PAD
from arena.games.language.exposure import (
    CanarySpec,
    candidates,
    exposure,
    make_canaries,
    sequence_nll,
    training_rows,
    written_secret,
)
from arena_plugins.text import train_bpe


def test_exposure_is_log2_space_minus_log2_rank() -> None:
    nll = np.array([3.0, 1.0, 2.0, 5.0, 2.5, 9.0, 0.5, 4.0])
    assert exposure(2.0, nll) == (3, pytest.approx(math.log2(8) - math.log2(3)))  # 1.0 and 0.5 rank above it
    assert exposure(0.5, nll) == (1, pytest.approx(3.0))  # the most likely candidate: log2 |R| bits
    assert exposure(9.0, nll) == (8, pytest.approx(0.0))  # the least likely: no exposure


class Bigram(torch.nn.Module):
    """A toy model: the next token's logits are row t of a fixed table."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.table = torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(3))

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.table[X.long().clamp(min=0)]


def test_exposure_on_a_toy_model_equals_a_hand_computation() -> None:
    model = Bigram(12)
    # three candidate "secrets" after the same two-token prefix (5, 7): tokens 1, 2 and 3
    X = torch.tensor([[5.0, 7, 1, PAD], [5.0, 7, 2, PAD], [5.0, 7, 3, PAD]])
    logp = torch.log_softmax(model.table, dim=-1)
    by_hand = [-(logp[5, 7] + logp[7, s]).item() for s in (1, 2, 3)]
    nll = sequence_nll(model, X).numpy()
    assert nll == pytest.approx(by_hand, rel=1e-6)
    true = 1  # the secret is candidate 1 (token 2)
    rank = 1 + sum(v < by_hand[true] for v in by_hand)
    assert exposure(float(nll[true]), nll) == (rank, pytest.approx(math.log2(3) - math.log2(rank)))


def test_canaries_are_distinct_secrets_of_the_format_inserted_as_often_as_asked() -> None:
    spec = CanarySpec(digits=2, repetitions=[1, 3], per_level=2)
    tok = train_bpe(["my secret number is 12", "numbers 0 1 2 3 4 5 6 7 8 9"] * 5, 300)
    canaries = make_canaries(spec, tok, 16, seed=5)
    assert len(set(canaries.secrets)) == 4 and all(s in candidates(2) for s in canaries.secrets)
    assert canaries.repetitions == [1, 1, 3, 3] and spec.copies == 8
    rows = training_rows(canaries)
    assert rows.shape == (8, 16)
    assert torch.equal(rows[4], canaries.X[2]) and torch.equal(rows[6], canaries.X[3])
    assert make_canaries(spec, tok, 16, seed=5).secrets == canaries.secrets


def test_a_completion_extracts_the_secret_only_when_it_writes_exactly_its_digits() -> None:
    assert written_secret(" 042 is the number") == "042"
    assert written_secret("0421") == "0421"  # more digits: another number, not the secret 042
    assert written_secret(" x042") == ""
