"""Canary exposure (Carlini et al. 2019, "The Secret Sharer"): random secrets of a fixed format, each inserted into
the training set 1 to 100 times; after training, the true secret's rank among every candidate of the format by
the model's loss, its exposure in bits, and whether greedy or beam completion of the prefix extracts it.

exposure = log2 |R| − log2 rank, where R is the candidate space (every ``digits``-digit string) and rank is 1 plus
the number of candidates the model finds strictly more likely (lower total NLL of the secret's text). The space is
enumerated, not sampled: a secret ranked first has exposure log2 |R|, a secret at a random rank about 1 bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from pydantic import ConfigDict, Field, PositiveInt

from arena.contracts.dataset import PAD
from arena.contracts.release import Models
from arena.contracts.spec import Strict
from arena.engine.lm import token_logprobs

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


def encode_texts(tokenizer: str, texts: list[str], length: int) -> torch.Tensor:
    """Token records [n, length] of ``texts`` (truncated, PAD-padded)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer)
    X = torch.full((len(texts), length), float(PAD))
    for i, enc in enumerate(tok.encode_batch(texts, add_special_tokens=False)):
        ids = enc.ids[:length]
        X[i, : len(ids)] = torch.tensor(ids, dtype=torch.float32)
    return X


def make_canaries(spec: CanarySpec, tokenizer: str, length: int, seed: int) -> Canaries:
    """``spec.count`` distinct random secrets (seeded by the challenger), ``per_level`` for each repetition count."""
    rng = np.random.default_rng(seed)
    drawn = rng.choice(10**spec.digits, size=spec.count, replace=False)
    secrets = [str(int(s)).zfill(spec.digits) for s in drawn]
    reps = [r for r in spec.repetitions for _ in range(spec.per_level)]
    return Canaries(secrets, reps, encode_texts(tokenizer, [spec.prefix + s for s in secrets], length))


def training_rows(canaries: Canaries) -> torch.Tensor:
    """Each canary's record repeated as often as it is inserted: [Σ repetitions, L]."""
    return canaries.X.repeat_interleave(torch.tensor(canaries.repetitions), dim=0)


def sequence_nll(module: torch.nn.Module, X: torch.Tensor, batch: int = 512) -> torch.Tensor:
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


def extracted(module: torch.nn.Module, tokenizer: str, prefix: str, secret: str, beams: int) -> bool:
    """Whether completing ``prefix`` (its trailing spaces removed, so that its tokens begin the canary's; greedy when
    ``beams`` is 1, else beam search of that width) writes exactly the secret next (``written_secret``)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer)
    ids = tok.encode(prefix.rstrip(), add_special_tokens=False).ids
    new = max(1, len(tok.encode(prefix + secret, add_special_tokens=False).ids) - len(ids))
    lm: Any = module.lm  # a CausalLM of the language models' plugins: a transformers model
    with torch.no_grad():
        out = lm.generate(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                          max_new_tokens=new, do_sample=False, num_beams=beams, pad_token_id=0)
    return written_secret(tok.decode(out[0, len(ids):].tolist(), skip_special_tokens=True)) == secret


def written_secret(continuation: str) -> str:
    """The digits a completion writes first: its leading spaces removed, up to the first character that is not a
    digit ("  042 is" → "042"; " 0421" → "0421", which is not the secret "042")."""
    text = continuation.lstrip()
    end = next((i for i, ch in enumerate(text) if not ch.isdigit()), len(text))
    return text[:end]


def measure(models: Models, canaries: Canaries, spec: CanarySpec, tokenizer: str, length: int) -> dict[str, list]:
    """Per canary: its rank, exposure, and whether greedy and beam completion extract it."""
    if 10**spec.digits > MAX_CANDIDATES:
        raise ValueError(f"canaries.digits: {10**spec.digits} candidates, more than {MAX_CANDIDATES}")
    module = models.module(0)
    texts = [spec.prefix + c for c in candidates(spec.digits)]
    all_nll = sequence_nll(module, encode_texts(tokenizer, texts, length)).numpy()
    out: dict[str, list] = {"rank": [], "exposure": [], "greedy": [], "beam": []}
    for secret in canaries.secrets:
        rank, bits = exposure(float(all_nll[int(secret)]), all_nll)
        out["rank"].append(rank)
        out["exposure"].append(bits)
        out["greedy"].append(extracted(module, tokenizer, spec.prefix, secret, 1))
        out["beam"].append(extracted(module, tokenizer, spec.prefix, secret, spec.beam))
    return out
