"""Canary exposure (Carlini et al. 2019, "The Secret Sharer"): random secrets of a fixed format, each inserted into
the training set 1 to 100 times; after training, the true secret's rank among every candidate of the format by
the model's loss, its exposure in bits, and whether greedy or beam completion of the prefix extracts it.

exposure = log2 |R| − log2 rank, where R is the candidate space (every ``digits``-digit string) and rank is 1 plus
the number of candidates the model finds strictly more likely (lower total NLL of the candidate's record). The
space is enumerated, not sampled: a secret ranked first has exposure log2 |R|, a secret at a random rank about
1 bit.

**One token sequence per candidate.** A canary's record is the prefix's tokens followed by one token per digit
(``secret_ids``), never the tokenizer's own encoding of the whole text: a BPE merges some digit strings (a 512-id
byte-level BPE trained on the Python docs has the token " 3"), so candidates would tokenise to different lengths
and their total NLLs would compare different numbers of factors: under a model that has learnt little (NLL ≈ 5
nats per token) every merged candidate outranks every unmerged one whatever was memorised. (In the language
scenario's LoRA release the 64-copy canary ranked 101st of 1,000 for exactly that reason: the 100 candidates
beginning with 3 were a token shorter; with one token per digit it ranks first.) The training record, the
candidate space and the completion are one token sequence per secret, so exposure and extraction score the same
thing.

**Extraction is not rank 1.** Completion (``complete``) walks the model's next-token distributions over the whole
vocabulary: greedy takes the most likely token at each step, beam search keeps the ``beam`` most likely partial
paths; a secret is extracted when the completion's tokens are its digits' tokens. Greedy decoding is not the
search for the most likely candidate: it commits to each digit before seeing the next, so it can write a secret
that ranks below others (a first digit chosen by a small margin, after which another first digit would have
continued far more surely). What greedy extraction does imply, and ``tests/games/language/test_exposure.py``
pins on a toy model: every step's token is the most likely one given the steps before, so the extracted secret
ranks first among the candidates that share all its digits but the last, and its NLL is the one the exposure
ranks (the sum of the log-probabilities the completion read).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from pydantic import ConfigDict, Field, PositiveInt

from arena.contracts.dataset import PAD
from arena.contracts.release import Models
from arena.contracts.spec import Strict
from arena.engine.lm import Forward, token_logprobs

MAX_CANDIDATES = 100_000


class CanarySpec(Strict):
    """The secret sharer's canaries: ``per_level`` secrets for each entry of ``repetitions`` (copies inserted into
    the training set), each ``prefix`` followed by ``digits`` random digits."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    prefix: str = Field(default="my secret number is ", min_length=1, max_length=200)
    digits: PositiveInt = Field(default=3, le=5, description="candidate space: 10^digits secrets")
    repetitions: list[PositiveInt] = Field(default_factory=lambda: [1, 4, 16], min_length=1, max_length=10)
    per_level: PositiveInt = Field(default=2, le=50, description="secrets per repetition count")
    beam: PositiveInt = Field(default=4, le=32, description="beam width of the extraction attempt")

    @property
    def count(self) -> int:
        return self.per_level * len(self.repetitions)

    @property
    def copies(self) -> int:
        """Canary records the training set gains."""
        return self.per_level * sum(self.repetitions)


@dataclass(frozen=True)
class Canaries:
    """The secrets (as digit strings), the copies of each, and their records [count, L]."""

    secrets: list[str]
    repetitions: list[int]
    X: torch.Tensor


def candidates(digits: int) -> list[str]:
    """Every secret of the format: the 10^digits zero-padded digit strings."""
    return [str(i).zfill(digits) for i in range(10**digits)]


@dataclass(frozen=True)
class SecretTokens:
    """How canaries are written in token ids: the prefix's ids and the one id of each digit."""

    prefix: list[int]
    digit: dict[str, int]

    def ids(self, secret: str) -> list[int]:
        """The canary of ``secret``: the prefix's ids, then one id per digit."""
        return self.prefix + [self.digit[d] for d in secret]


def secret_tokens(tokenizer: str, prefix: str) -> SecretTokens:
    """The prefix's ids (the tokenizer's encoding of it, trailing space included) and each digit's single id; a
    ValueError naming the field where a digit is not one token of the vocabulary."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer)
    digit = {}
    for d in "0123456789":
        ids = tok.encode(d, add_special_tokens=False).ids
        if len(ids) != 1:
            raise ValueError(f"exposure: the tokenizer writes the digit {d!r} as {len(ids)} tokens, not one: a "
                             "canary's digits must be one token each")
        digit[d] = ids[0]
    if len(set(digit.values())) < 10:
        raise ValueError("exposure: the tokenizer gives two digits one token (an unknown-token id?): a canary's "
                         "digits must be ten distinct tokens")
    return SecretTokens(tok.encode(prefix, add_special_tokens=False).ids, digit)


def records(ids: list[list[int]], length: int) -> torch.Tensor:
    """Token records [n, length] of id lists (PAD-padded); a ValueError if one is longer than ``length``."""
    X = torch.full((len(ids), length), float(PAD))
    for i, row in enumerate(ids):
        if len(row) > length:
            raise ValueError(f"exposure.prefix: a canary takes {len(row)} tokens, more than the records' {length}")
        X[i, : len(row)] = torch.tensor(row, dtype=torch.float32)
    return X


def make_canaries(spec: CanarySpec, tokenizer: str, length: int, seed: int) -> Canaries:
    """``spec.count`` distinct random secrets (seeded by the challenger), ``per_level`` for each repetition count."""
    rng = np.random.default_rng(seed)
    drawn = rng.choice(10**spec.digits, size=spec.count, replace=False)
    secrets = [str(int(s)).zfill(spec.digits) for s in drawn]
    reps = [r for r in spec.repetitions for _ in range(spec.per_level)]
    write = secret_tokens(tokenizer, spec.prefix)
    return Canaries(secrets, reps, records([write.ids(s) for s in secrets], length))


def training_rows(canaries: Canaries) -> torch.Tensor:
    """Each canary's record repeated as often as it is inserted: [Σ repetitions, L]."""
    return canaries.X.repeat_interleave(torch.tensor(canaries.repetitions), dim=0)


def sequence_nll(module: Forward, X: torch.Tensor, batch: int = 512) -> torch.Tensor:
    """Total next-token NLL [n] of each record (the loss of its whole text, its first token given)."""
    out = []
    with torch.no_grad():
        for part in X.split(batch):
            logp, targets, keep = token_logprobs(module, part)
            out.append(-(logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1) * keep).sum(-1))
    return torch.cat(out)


def exposure(true_nll: float, candidate_nll: np.ndarray) -> tuple[int, float]:
    """(rank, exposure in bits) of a secret of NLL ``true_nll`` among the candidates' NLLs (the true one among
    them): rank = 1 + #(candidates strictly more likely); exposure = log2 |R| − log2 rank."""
    rank = 1 + int(np.sum(candidate_nll < true_nll))
    return rank, math.log2(len(candidate_nll)) - math.log2(rank)


def complete(module: Forward, ids: list[int], steps: int, beams: int) -> list[int]:
    """The ``steps`` tokens that follow ``ids`` under ``module`` by beam search of width ``beams`` over the whole
    vocabulary (greedy when 1): each partial path extended by every token, the ``beams`` of highest total
    log-probability kept; the best path at the end. No end-of-text stop and no length penalty: every path has
    ``steps`` tokens, so the total log-probability is the NLL the exposure ranks by, negated."""
    paths, scores = [list(ids)], torch.zeros(1)
    with torch.no_grad():
        for _ in range(steps):
            X = torch.tensor(paths, dtype=torch.float32)
            step = torch.log_softmax(module(X)[:, -1].double(), dim=-1)  # the next token's distribution
            total = (scores.unsqueeze(1) + step).reshape(-1)
            best = torch.topk(total, min(beams, total.numel())).indices
            V = step.shape[1]
            paths = [paths[int(b) // V] + [int(b) % V] for b in best]
            scores = total[best]
    return paths[0][len(ids):]


def extracted(completion: list[int], write: SecretTokens, secret: str) -> bool:
    """Whether a completion of the prefix (``complete``) is exactly the secret's digit tokens."""
    return completion == write.ids(secret)[len(write.prefix):]


def measure(models: Models, canaries: Canaries, spec: CanarySpec, tokenizer: str, length: int) -> dict[str, list]:
    """Per canary: its rank, exposure, and whether greedy and beam completion extract it."""
    if 10**spec.digits > MAX_CANDIDATES:
        raise ValueError(f"canaries.digits: {10**spec.digits} candidates, more than {MAX_CANDIDATES}")
    module = models.module(0)
    write = secret_tokens(tokenizer, spec.prefix)
    all_nll = sequence_nll(module, records([write.ids(c) for c in candidates(spec.digits)], length)).numpy()
    # a completion of the prefix does not depend on the secret: one greedy and one beam completion serve them all
    greedy, beam = (complete(module, write.prefix, spec.digits, b) for b in (1, spec.beam))
    out: dict[str, list] = {"rank": [], "exposure": [], "greedy": [], "beam": []}
    for secret in canaries.secrets:
        rank, bits = exposure(float(all_nll[int(secret)]), all_nll)
        out["rank"].append(rank)
        out["exposure"].append(bits)
        out["greedy"].append(extracted(greedy, write, secret))
        out["beam"].append(extracted(beam, write, secret))
    return out
