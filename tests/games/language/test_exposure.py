"""Canary exposure: rank and bits on hand-made losses, a toy model's candidate losses summed by hand, the canaries'
records and copies (one token per digit, whatever the tokenizer merges), and what greedy extraction implies for the
rank on toy models."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from arena import PAD
from arena.games.language.exposure import (
    CanarySpec,
    SecretTokens,
    candidates,
    complete,
    exposure,
    extracted,
    make_canaries,
    records,
    secret_tokens,
    sequence_nll,
    training_rows,
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


def test_every_candidate_is_the_prefix_then_one_token_per_digit_even_where_the_tokenizer_merges_digits() -> None:
    tok = train_bpe(["my secret number is 33", "333 33 3 31 311 3"] * 20 + ["0 1 2 4 5 6 7 8 9"], 300)
    from tokenizers import Tokenizer

    merged = Tokenizer.from_str(tok).encode("my secret number is 311", add_special_tokens=False).ids
    plain = Tokenizer.from_str(tok).encode("my secret number is 011", add_special_tokens=False).ids
    assert len(merged) < len(plain)  # the tokenizer's own encoding: "311" is a token shorter
    write = secret_tokens(tok, "my secret number is ")
    assert len(write.ids("311")) == len(write.ids("011")) == len(write.prefix) + 3
    assert write.ids("311")[-3:] == [write.digit["3"], write.digit["1"], write.digit["1"]]
    X = records([write.ids(c) for c in candidates(3)], 32)
    assert bool(((X != PAD).sum(1) == len(write.prefix) + 3).all())  # every candidate: one length
    with pytest.raises(ValueError, match="exposure.prefix"):
        records([write.ids("311")], len(write.prefix) + 2)


DIGITS, SPACE, PREFIX = 10, 10, 11  # a toy vocabulary: ids 0-9 the digits, 10 the space, 11 the prefix's word
TOY = SecretTokens([PREFIX, SPACE], {str(d): d for d in range(DIGITS)})


class Table(torch.nn.Module):
    """A bigram model over the toy vocabulary from a table of next-token log-probabilities (row: current token)."""

    def __init__(self, logp: torch.Tensor) -> None:
        super().__init__()
        self.logp = logp

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.logp[X.long().clamp(min=0)]


def _extracts(model: Table, secret: str, beams: int) -> bool:
    return extracted(complete(model, TOY.prefix, len(secret), beams), TOY, secret)


def _rank(model: Table, secrets: list[str], secret: str) -> int:
    nll = sequence_nll(model, records([TOY.ids(s) for s in secrets], 8)).numpy()
    return exposure(float(nll[secrets.index(secret)]), nll)[0]


def test_greedy_can_extract_a_secret_that_is_not_the_most_likely_candidate() -> None:
    """After the space "1" is a little likelier than "3" (0.30 vs 0.29), but "3" is followed by "3" with probability
    0.9 and "1" by any digit alike: greedy writes "11", the likeliest candidate is "33", which beam search finds."""
    p = torch.full((12, 12), 1e-6)
    p[SPACE, :DIGITS] = 0.41 / 8
    p[SPACE, 1], p[SPACE, 3] = 0.30, 0.29
    p[1, :DIGITS] = 0.098
    p[1, 1] = 0.118
    p[3, :DIGITS] = 0.1 / 9
    p[3, 3] = 0.9
    p[PREFIX, SPACE] = 1.0
    model = Table((p / p.sum(1, keepdim=True)).log())
    assert _extracts(model, "11", beams=1)
    assert _rank(model, candidates(2), "11") > 1 and _rank(model, candidates(2), "33") == 1
    assert _extracts(model, "33", beams=2) and not _extracts(model, "11", beams=2)


@pytest.mark.parametrize("seed", range(5))
def test_a_greedily_extracted_secret_ranks_first_among_the_candidates_that_differ_in_its_last_digit(seed: int) -> None:
    """What greedy extraction does imply: each step took the likeliest token, so the written secret beats every
    candidate that shares all its digits but the last; and the completion's total log-probability is exactly the
    NLL difference the exposure ranks by."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(12, 12, generator=g) * 2
    logits[:, DIGITS:] = -30.0  # the toy's completions are digits
    logits[PREFIX, SPACE] = 30.0
    model = Table(torch.log_softmax(logits, -1))
    written = complete(model, TOY.prefix, 3, beams=1)
    secret = "".join(str(t) for t in written)
    assert _extracts(model, secret, beams=1)
    siblings = [secret[:2] + str(d) for d in range(DIGITS)]
    assert _rank(model, siblings, secret) == 1
    logp = model.logp
    path = [SPACE, *written]
    read = sum(float(logp[a, b]) for a, b in zip(path[:-1], path[1:], strict=True))
    X = records([TOY.ids(secret)], 8)
    assert -float(sequence_nll(model, X)[0]) == pytest.approx(float(logp[PREFIX, SPACE]) + read, rel=1e-5)
