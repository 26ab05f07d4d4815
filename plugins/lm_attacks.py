"""Membership attacks on causal language models (the ``language`` game), ordinary plugins run in the sandbox on the
game's view. Every score is higher for a more member-like record; each attack's hard decisions threshold its score
at the (1 − ``fpr``) quantile of the attacker's population records (known non-members).

Signals, per record x of real tokens x_1..x_T (position t predicted from x_<t):

* ``lm-loss`` (Yeom et al. 2018): −(1/T) Σ_t −log p(x_t), the negative mean NLL;
* ``lm-zlib`` (Carlini et al. 2021): −NLL / zlib, the mean NLL over the zlib-compressed length of the text in bytes;
* ``lm-lowercase`` (Carlini et al. 2021): NLL(lowercased text) − NLL(x), the log of the ratio of the perplexities
  after and before lowercasing;
* ``min-k`` (Shi et al. 2024): the mean of the k % lowest log p(x_t);
* ``min-k-plus-plus`` (Zhang et al. 2024): the mean of the k % lowest (log p(x_t) − μ_t)/σ_t, μ_t and σ_t the mean
  and standard deviation of log p(z) for z drawn from the model's next-token distribution at t;
* ``lm-reference`` (Carlini et al. 2021; Mireshghallah et al. 2022): NLL_ref(x) − NLL(x), the reference the mean
  NLL of reference models the attacker trains on population text with the target's procedure;
* ``lm-lira`` (Carlini et al. 2022) and ``lm-rmia`` (Zarifzadeh et al. 2024) on reference language models from the
  membership game's shadow pool (``arena.train_pool``), with φ = −mean NLL and log Pr(x|θ) = −Σ_t NLL.
"""

from __future__ import annotations

import abc
import math
import zlib
from typing import ClassVar, Literal

import numpy as np
import torch
from pydantic import BaseModel, Field, PositiveInt

from arena import (
    PAD,
    Attack,
    LanguageView,
    MembershipGuess,
    PluginParams,
    hookimpl,
    likelihood_ratio,
    lm_loss,
    one_sided_out,
    rmia_ratios,
    rmia_scores,
    train_pool,
)

ROWS = 256
"""Records per query (well under the sandbox's per-query quota)."""


def token_stats(logp: torch.Tensor, X: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(log p(x_t), μ_t, σ_t, real) [n, T] from next-token log-probabilities [n, T, V] of records X [n, T + 1]:
    μ_t = Σ_v p_v log p_v, σ_t = sqrt(Σ_v p_v (log p_v)² − μ_t²)."""
    lp = logp.double()
    targets = X[:, 1:].long()
    real = (targets != PAD).numpy()
    own = lp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    p = lp.exp()
    mu = (p * lp).sum(-1)
    var = ((p * lp * lp).sum(-1) - mu * mu).clamp(min=0.0)
    return own.numpy(), mu.numpy(), var.sqrt().numpy(), real


def mean_nll(own: np.ndarray, real: np.ndarray) -> np.ndarray:
    """Mean NLL [n] over each record's real tokens."""
    return -(own * real).sum(1) / np.maximum(real.sum(1), 1)


def lowest_mean(values: np.ndarray, real: np.ndarray, k: float) -> np.ndarray:
    """Per record, the mean of its ⌈k·T⌉ lowest values over its T real tokens (at least one)."""
    out = np.empty(len(values))
    for i, (v, r) in enumerate(zip(values, real)):
        kept = np.sort(v[r])
        out[i] = kept[: max(1, math.ceil(k * len(kept)))].mean() if len(kept) else 0.0
    return out


def min_k(own: np.ndarray, real: np.ndarray, k: float) -> np.ndarray:
    """Min-k % (Shi et al. 2024): the mean of the k % lowest token log-probabilities."""
    return lowest_mean(own, real, k)


def min_k_plus_plus(own: np.ndarray, mu: np.ndarray, sigma: np.ndarray, real: np.ndarray, k: float) -> np.ndarray:
    """Min-k %++ (Zhang et al. 2024): the mean of the k % lowest (log p(x_t) − μ_t)/σ_t."""
    z = (own - mu) / np.maximum(sigma, 1e-12)
    return lowest_mean(z, real, k)


def zlib_bytes(text: str) -> int:
    """The zlib-compressed length of ``text`` (UTF-8) in bytes: Carlini et al.'s zlib entropy."""
    return len(zlib.compress(text.encode("utf-8")))


def decode(tokenizer: str, X: torch.Tensor) -> list[str]:
    """The text of each record (its real tokens)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer)
    return [tok.decode([int(t) for t in row if t != PAD]) for row in X.tolist()]


def encode(tokenizer: str, texts: list[str], length: int) -> torch.Tensor:
    """Records [n, length] of ``texts`` (truncated, PAD-padded)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer)
    X = torch.full((len(texts), length), float(PAD))
    for i, enc in enumerate(tok.encode_batch(texts, add_special_tokens=False)):
        X[i, : min(len(enc.ids), length)] = torch.tensor(enc.ids[:length], dtype=torch.float32)
    return X


def query_stats(model, X: torch.Tensor) -> tuple[np.ndarray, ...]:  # noqa: ANN001 - the view's query interface
    parts = [token_stats(model.log_proba(part), part) for part in X.split(ROWS)]
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(4))


def query_nll(model, X: torch.Tensor) -> np.ndarray:  # noqa: ANN001
    return np.concatenate([model.loss(part, torch.zeros(len(part), dtype=torch.long)).double().numpy()
                           for part in X.split(ROWS)])


class SignalParams(PluginParams):
    fpr: float = Field(default=0.1, gt=0.0, lt=1.0, description="population FPR the hard threshold is set for")


class KParams(SignalParams):
    k: float = Field(default=0.2, gt=0.0, le=1.0, description="share of the lowest-scoring tokens averaged")


class TextSignal(Attack):
    """A score computed from the target's answers alone; population records set the hard threshold."""

    game = "language"
    threat_model = frozenset({"query", "population"})
    Params: ClassVar[type[BaseModel]] = SignalParams

    @abc.abstractmethod
    def signal(self, view: LanguageView, X: torch.Tensor) -> np.ndarray:
        """The score [n] of records X (higher: more member-like)."""

    def run(self, view: LanguageView) -> MembershipGuess:
        scores = self.signal(view, view.challenge_X)
        fpr = float(self.params.fpr)  # type: ignore[attr-defined]  # every Params here is a SignalParams
        threshold = float(np.quantile(self.signal(view, view.population_X), 1.0 - fpr))
        return MembershipGuess(scores=scores, decisions=scores > threshold)


class LossAttack(TextSignal):
    """The negative mean next-token NLL (Yeom et al. 2018)."""

    name = "lm-loss"

    def signal(self, view: LanguageView, X: torch.Tensor) -> np.ndarray:
        return -query_nll(view.model, X)


class ZlibAttack(TextSignal):
    """The mean NLL over the text's zlib-compressed length, negated (Carlini et al. 2021)."""

    name = "lm-zlib"

    def signal(self, view: LanguageView, X: torch.Tensor) -> np.ndarray:
        sizes = np.array([zlib_bytes(t) for t in decode(view.tokenizer, X)], dtype=np.float64)
        return -query_nll(view.model, X) / np.maximum(sizes, 1.0)


class LowercaseAttack(TextSignal):
    """NLL of the lowercased text minus NLL of the text (Carlini et al. 2021): a record whose own casing the model
    prefers by much was likely trained on."""

    name = "lm-lowercase"

    def signal(self, view: LanguageView, X: torch.Tensor) -> np.ndarray:
        lower = encode(view.tokenizer, [t.lower() for t in decode(view.tokenizer, X)], X.shape[1])
        return query_nll(view.model, lower) - query_nll(view.model, X)


class MinK(TextSignal):
    """Min-k % (Shi et al. 2024)."""

    name = "min-k"
    Params = KParams

    def signal(self, view: LanguageView, X: torch.Tensor) -> np.ndarray:
        own, _, _, real = query_stats(view.model, X)
        return min_k(own, real, self.params.k)  # type: ignore[attr-defined]  # a KParams


class MinKPlusPlus(TextSignal):
    """Min-k %++ (Zhang et al. 2024)."""

    name = "min-k-plus-plus"
    Params = KParams

    def signal(self, view: LanguageView, X: torch.Tensor) -> np.ndarray:
        own, mu, sigma, real = query_stats(view.model, X)
        return min_k_plus_plus(own, mu, sigma, real, self.params.k)  # type: ignore[attr-defined]  # a KParams


class ReferenceParams(SignalParams):
    references: PositiveInt = Field(default=2, le=1024, description="reference models (even: complementary "
                                                                   "halves of the population)")


def pool_nll(pool_models, X: torch.Tensor) -> np.ndarray:  # noqa: ANN001 - arena.Models
    """Mean NLL [K, n] of records X under each of the pool's models."""
    return np.stack([lm_loss(pool_models, X, k).double().numpy() for k in range(pool_models.k)])


class ReferenceAttack(Attack):
    """NLL under reference models minus NLL under the target (Carlini et al. 2021): the references train on halves
    of the attacker's population (never on a challenge record) with the target's procedure."""

    name = "lm-reference"
    game = "language"
    threat_model = frozenset({"query", "population", "training"})
    Params = ReferenceParams
    params: ReferenceParams

    def run(self, view: LanguageView) -> MembershipGuess:
        pool = train_pool(view, self.params.references, data="population")

        def score(X: torch.Tensor) -> np.ndarray:
            return pool_nll(pool.models, X).mean(0) - query_nll(view.model, X)

        scores = score(view.challenge_X)
        threshold = float(np.quantile(score(view.population_X), 1.0 - self.params.fpr))
        return MembershipGuess(scores=scores, decisions=scores > threshold)


class PoolParams(PluginParams):
    shadows: PositiveInt = Field(default=8, ge=2, le=4096, description="reference models (even)")


class LiRAParams(PoolParams):
    variant: Literal["online", "offline"] = "online"
    fixed_variance: bool = Field(default=True, description="one variance for all records (few references)")


class LMLiRA(Attack):
    """LiRA on reference language models trained on random halves of the challenge (Carlini et al. 2022; at LLM
    scale, Hayes et al. 2025): φ = −mean NLL; online, log N(φ; IN) − log N(φ; OUT); offline, log Pr[Z ≤ φ] for Z
    the OUT normal."""

    name = "lm-lira"
    game = "language"
    threat_model = frozenset({"query", "training"})
    Params = LiRAParams
    params: LiRAParams

    def run(self, view: LanguageView) -> MembershipGuess:
        pool = train_pool(view, self.params.shadows)
        shadow_phi = -pool_nll(pool.models, view.challenge_X)
        phi = -query_nll(view.model, view.challenge_X)
        if self.params.variant == "online":
            scores = likelihood_ratio(shadow_phi, pool.challenge_in, phi, self.params.fixed_variance)
            return MembershipGuess(scores=scores, decisions=scores > 0.0)
        scores = one_sided_out(shadow_phi, ~pool.challenge_in, phi, self.params.fixed_variance)
        return MembershipGuess(scores=scores, decisions=scores > math.log(0.95))


class RMIAParams(PoolParams):
    variant: Literal["online", "offline"] = "offline"
    gamma: float = Field(default=1.0, gt=0.0, allow_inf_nan=False)
    a: float | None = Field(default=None, ge=0.0, le=1.0)
    fpr: float = Field(default=0.1, gt=0.0, lt=1.0)


class LMRMIA(Attack):
    """RMIA (Zarifzadeh et al. 2024) on reference language models from the challenge-halves pool, with
    log Pr(x|θ) = −Σ_t NLL_t (the sequence's log-likelihood) against every population record z."""

    name = "lm-rmia"
    game = "language"
    threat_model = frozenset({"query", "population", "training"})
    Params = RMIAParams
    params: RMIAParams

    def run(self, view: LanguageView) -> MembershipGuess:
        p = self.params
        pool = train_pool(view, p.shadows)

        def log_lik(nll: np.ndarray, X: torch.Tensor) -> np.ndarray:
            return -nll * (X[:, 1:] != PAD).sum(1).double().numpy()

        cX, pX = view.challenge_X, view.population_X
        x_ratio, z_ratio = rmia_ratios(log_lik(query_nll(view.model, cX), cX), log_lik(pool_nll(pool.models, cX), cX),
                                       pool.challenge_in, log_lik(query_nll(view.model, pX), pX),
                                       log_lik(pool_nll(pool.models, pX), pX), p.variant, p.a, paired=True)
        scores = rmia_scores(x_ratio, z_ratio, p.gamma)
        threshold = float(np.quantile(z_ratio, 1.0 - p.fpr))
        return MembershipGuess(scores=scores, decisions=x_ratio > threshold, references=len(z_ratio))


@hookimpl
def register_attacks(register) -> None:  # noqa: ANN001
    for attack in (LossAttack, ZlibAttack, LowercaseAttack, MinK, MinKPlusPlus, ReferenceAttack, LMLiRA, LMRMIA):
        register(attack)
