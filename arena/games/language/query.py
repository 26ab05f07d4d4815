"""Query access to a released language model: the distribution of every next token of a record, and the mean
loss of each record. What the text attacks read of the target (through the sandbox's query proxy) and of the
reference models they train (``Models``, in their own process)."""

from __future__ import annotations

import torch

from arena.contracts.release import BlackBox, Models
from arena.engine.lm import example_nll, token_logprobs

BATCH = 128
"""Records per forward pass."""


def lm_log_proba(models: Models, X: torch.Tensor, k: int = 0) -> torch.Tensor:
    """Log-probabilities [n, L-1, V] of each next token of records X [n, L] under model ``k`` (row t: the
    distribution of token t + 1)."""
    module = models.module(k)
    with torch.no_grad():
        parts = [token_logprobs(module, part)[0] for part in X.split(BATCH)]
    return torch.cat(parts) if parts else torch.zeros(0, max(X.shape[1] - 1, 0), models.arch.n_classes)


def lm_loss(models: Models, X: torch.Tensor, k: int = 0) -> torch.Tensor:
    """Mean next-token NLL [n] of each record X [n, L] under model ``k``."""
    module = models.module(k)
    with torch.no_grad():
        parts = [example_nll(module, part) for part in X.split(BATCH)]
    return torch.cat(parts) if parts else torch.zeros(0)


class TextBlackBox(BlackBox):
    """Query access to one released language model: for records X [n, L] (token ids, PAD-padded), ``log_proba``
    answers the next-token log-probabilities [n, L-1, V], ``predict_proba`` their exponentials, ``loss`` each
    record's mean next-token NLL [n] (``y`` is not read: a record is its own label)."""

    def predict_proba(self, X: torch.Tensor) -> torch.Tensor:
        return self.log_proba(X).exp()

    def log_proba(self, X: torch.Tensor) -> torch.Tensor:
        return lm_log_proba(self._models, X)

    def loss(self, X: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        return lm_loss(self._models, X)


def next_token_accuracy(models: Models, X: torch.Tensor, k: int = 0) -> tuple[float, float]:
    """(next-token accuracy, perplexity) of model ``k`` over the real tokens of held-out records X [n, L]."""
    module = models.module(k)
    hits = tokens = nll = 0.0
    with torch.no_grad():
        for part in X.split(BATCH):
            logp, targets, keep = token_logprobs(module, part)
            hits += float(((logp.argmax(-1) == targets) & keep).sum())
            nll -= float((logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1) * keep).sum())
            tokens += float(keep.sum())
    if tokens == 0:
        raise ValueError("the held-out records hold no token to predict")
    return hits / tokens, float(torch.tensor(nll / tokens).exp())
