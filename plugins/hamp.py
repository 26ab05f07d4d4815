"""HAMP (Chen & Pattabiraman, NDSS 2024): enforce less confident predictions, at training and at answering time.

Training: each label becomes a high-entropy soft label, p on the true class and (1 − p)/(C − 1) on the others,
with p the largest value whose entropy is at least γ·log C; the loss is the cross-entropy against it minus α
times the entropy of the model's output (the entropy regulariser). Answering: each query's output scores are
replaced by the scores the model gives a random input (uniform on [0, 1]^d, the arena's feature range), re-ordered
so that the classes keep the query's own ranking: the predicted label, and the accuracy, are unchanged, while the
confidence carries nothing about the query. The paper draws a fresh random input per query; here each model draws
a bank of ``bank`` random inputs once, from its seed, and a query takes the bank row its output hashes to, so that
answers are deterministic. Claims no privacy guarantee.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from pydantic import Field, PositiveInt

from arena import RECIPE_FIELDS, Defense, Fit, FitTask, Models, PluginParams, hookimpl
from arena_plugins.defense_kit import (
    entropy,
    masked_mean,
    model_seeds,
    refuse_newton,
    row_hash,
    smoothed,
    soft_cross_entropy,
)


class HAMPParams(PluginParams):
    gamma: float = Field(default=0.9, gt=0.0, lt=1.0, allow_inf_nan=False,
                         description="entropy threshold γ: the soft label's entropy is γ·log C, in (0, 1)")
    alpha: float = Field(default=0.01, ge=0.0, le=100.0, allow_inf_nan=False,
                         description="weight α of the entropy regulariser")
    bank: PositiveInt = Field(default=256, le=1_000_000, description="random inputs per model for the answers")


def true_class_probability(gamma: float, n_classes: int) -> float:
    """The largest p ≥ 1/C whose soft label (p, (1−p)/(C−1), ...) has entropy ≥ γ·log C (bisection; the entropy
    falls from log C at p = 1/C to 0 at p = 1)."""
    C, target = n_classes, gamma * math.log(n_classes)

    def h(p: float) -> float:
        rest = (1.0 - p) / (C - 1)
        return -p * math.log(p) - (C - 1) * (rest * math.log(rest) if rest > 0 else 0.0)

    lo, hi = 1.0 / C, 1.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if h(mid) >= target else (lo, mid)
    return lo


def reorder_like(scores: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``scores`` [..., C] re-ordered so that their ranking over classes is that of ``like`` [..., C]: the j-th
    largest score goes to ``like``'s j-th largest class."""
    values = scores.sort(dim=-1, descending=True).values
    order = like.argsort(dim=-1, descending=True, stable=True)
    return torch.empty_like(values).scatter_(-1, order, values)


class HAMP(Defense):
    """HAMP: high-entropy soft labels and an entropy regulariser in training, and answers whose scores come from
    a random input, ranked like the query's own (Chen & Pattabiraman 2024)."""

    name = "hamp"
    Params = HAMPParams
    params: HAMPParams
    honours = RECIPE_FIELDS - {"solver"}
    answers_queries = True

    def fit(self, task: FitTask) -> Fit:
        refuse_newton(self.name, task)
        p, C = self.params, task.arch.n_classes
        true_p = true_class_probability(p.gamma, C)
        ensemble = task.ensemble()
        opt = task.optimizer(ensemble)
        for X, y, valid in task.minibatches():
            out = ensemble(X)
            loss = soft_cross_entropy(out, smoothed(y, C, true_p, X.dtype), valid)
            loss = loss - p.alpha * masked_mean(entropy(out), valid).sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        fit = task.finish(ensemble, opt)
        noise = []
        for seed in model_seeds(task, "hamp-bank"):
            g = torch.Generator().manual_seed(seed)
            noise.append(torch.rand(p.bank, task.arch.n_features, generator=g, dtype=task.X.dtype))
        bank = F.softmax(Models(task.arch, fit.state).logits(torch.stack(noise).to(task.device)), dim=-1)
        return Fit(fit.state, None, {"bank": bank.sort(dim=-1, descending=True).values})

    def answer(self, logits: torch.Tensor, answering: dict[str, torch.Tensor]) -> torch.Tensor:
        bank = answering["bank"].to(logits.dtype)  # [K, M, C], each row sorted
        pick = row_hash(logits, bank.shape[1])  # [K, n]
        scores = bank.gather(1, pick.unsqueeze(-1).expand(*pick.shape, bank.shape[-1]))
        return reorder_like(scores, logits).clamp_min(torch.finfo(logits.dtype).tiny).log()


@hookimpl
def register_defenses(register) -> None:  # noqa: ANN001
    register(HAMP)
