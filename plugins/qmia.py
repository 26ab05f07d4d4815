"""QMIA, the quantile-regression membership attack of Bertran, Tang, Kearns, Morgenstern, Roth & Wu, "Scalable
Membership Inference Attacks via Quantile Regression" (NeurIPS 2023): no shadow models, one small regressor.

The statistic is the target's hinge score s(x, y) = z_y - max_{j≠y} z_j on its logits z (the authors' score;
log-probabilities give the same value, the softmax normaliser cancels). Population records are non-members of the
target, so a model q(x, y) fitted to their scores with the pinball loss at level α,
ρ_α(s - q) = max(α (s - q), (α - 1)(s - q)), estimates the α-quantile of a non-member's score *given the record*:
the per-example threshold that shadow-model attacks estimate with many models. The attack at level α says member
when s(x, y) > q_α(x, y), a test whose false-positive rate is 1 - α for every kind of record.

One regressor predicts a grid of levels at once (one output head each, as the authors' multi-quantile model), and
its outputs are sorted per record (monotone rearrangement, Chernozhukov et al. 2010) so that the quantiles never
cross. The continuous score is the level at which s sits among a record's predicted quantiles (linear between
heads), so thresholding it at a level of the grid reproduces that head's test exactly.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from pydantic import Field
from torch import nn

from arena import Attack, MembershipGuess, MembershipView, PluginParams, hookimpl


def hinge_score(logits: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """s(x, y) = z_y - max_{j≠y} z_j, float64 [n], from logits or log-probabilities [n, C]."""
    z = logits.double()
    own = z.gather(-1, y.unsqueeze(-1)).squeeze(-1)
    others = z.scatter(-1, y.unsqueeze(-1), -math.inf).max(dim=-1).values
    return (own - others).numpy()


def pinball_loss(predicted: torch.Tensor, target: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """Mean over records of the summed pinball losses ρ_α(s - q_α): ``predicted`` [n, L], ``target`` [n],
    ``levels`` [L]."""
    error = target.unsqueeze(-1) - predicted
    return torch.maximum(levels * error, (levels - 1) * error).sum(-1).mean()


def quantile_levels(count: int, top: float, fpr: float) -> np.ndarray:
    """``count`` levels from 0 to ``top``, evenly spaced in log(1 - α) so that the grid is finest near 1, where
    low false-positive rates are decided, plus the level 1 - ``fpr`` of the hard decision; sorted, unique."""
    grid = 1.0 - np.logspace(0.0, math.log10(1.0 - top), count)
    return np.unique(np.round(np.append(grid, 1.0 - fpr), 12))


def level_of(score: np.ndarray, quantiles: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """The level at which each score [n] sits among its record's sorted quantiles [n, L] (at ``levels`` [L]):
    linear between the two heads around it; below the lowest head, its level; above the top head, the top
    level plus (1 - top level) · m / (1 + m), m the margin over the top head in units of the last cell's width,
    so that records past every head keep their order (below 1). For every head j but the lowest,
    ``level_of(s) ≥ α_j`` exactly when ``s ≥ q_j``."""
    n, L = quantiles.shape
    k = (quantiles <= score[:, None]).sum(axis=1)  # heads at or below the score
    rows = np.arange(n)
    lo, hi = np.clip(k - 1, 0, L - 1), np.clip(k, 0, L - 1)
    q_lo, q_hi = quantiles[rows, lo], quantiles[rows, hi]
    width = q_hi - q_lo
    frac = np.where(width > 0, (score - q_lo) / np.where(width > 0, width, 1.0), 0.0)
    inside = levels[lo] + frac * (levels[hi] - levels[lo])
    cell = np.maximum(quantiles[:, -1] - quantiles[:, -2], 1e-12) if L > 1 else np.ones(n)
    margin = (score - quantiles[:, -1]) / cell
    tail = levels[-1] + (1.0 - levels[-1]) * margin / (1.0 + margin)
    return np.where(k == 0, levels[0], np.where(k == L, tail, inside))


class QMIAParams(PluginParams):
    levels: int = Field(default=41, ge=2, le=1000, description="quantile heads on the grid (plus 1 - fpr)")
    top: float = Field(default=0.999, gt=0.5, lt=1.0, description="highest quantile level of the grid")
    hidden: int = Field(default=64, ge=1, le=4096, description="width of the regressor's two hidden layers")
    epochs: int = Field(default=300, ge=1, le=100_000, description="passes over the population")
    batch_size: int | None = Field(default=None, ge=1, le=1_000_000, description="records per step (None: the "
                                   "whole population, full-batch steps, whose last iterate sits at the quantiles)")
    lr: float = Field(default=1e-2, gt=0.0, le=1.0, description="Adam's learning rate")
    weight_decay: float = Field(default=1e-4, ge=0.0, le=1.0)
    use_label: bool = Field(default=True, description="the regressor reads the one-hot label too: q(x, y)")
    fpr: float = Field(default=0.1, gt=0.0, lt=1.0, description="the hard decision: member when s > q_(1-fpr)")


def regressor(d_in: int, hidden: int, heads: int) -> nn.Module:
    """The quantile model: a two-hidden-layer MLP from the flat record (and label) to one output per level."""
    return nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, heads))


def fit_quantiles(features: torch.Tensor, scores: np.ndarray, levels: np.ndarray, p: QMIAParams,
                  seed: int) -> nn.Module:
    """Minimise the pinball loss of every head on (features, scores) with Adam, in seeded minibatches; the
    targets are standardised by their mean and spread, which the returned model undoes."""
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = regressor(features.shape[1], p.hidden, len(levels))
    mean, spread = float(scores.mean()), float(scores.std()) or 1.0
    target = torch.as_tensor((scores - mean) / spread, dtype=torch.float32)
    level_t = torch.as_tensor(levels, dtype=torch.float32)
    opt = torch.optim.Adam(net.parameters(), lr=p.lr, weight_decay=p.weight_decay)
    n = len(target)
    for _ in range(p.epochs):
        for batch in torch.randperm(n, generator=gen).split(p.batch_size or n):
            opt.zero_grad()
            pinball_loss(net(features[batch]), target[batch], level_t).backward()
            opt.step()
    return nn.Sequential(net, _Affine(mean, spread)).eval()


class _Affine(nn.Module):
    """Undo the targets' standardisation: q = mean + spread · output."""

    def __init__(self, mean: float, spread: float) -> None:
        super().__init__()
        self.mean, self.spread = mean, spread

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mean + self.spread * x


class QMIA(Attack):
    """Bertran et al.'s quantile-regression attack: a regressor fitted on the population's hinge scores under the
    target (pinball loss, one head per level) gives each challenge record its own non-member quantiles; the score
    is the level its hinge score reaches among them, the hard decision the head at 1 - ``fpr``. Trains no shadow
    model and needs no knowledge of the target's architecture or training."""

    name = "qmia"
    game = "membership"
    threat_model = frozenset({"query", "population"})
    Params = QMIAParams
    params: QMIAParams

    def run(self, view: MembershipView) -> MembershipGuess:
        p = self.params
        levels = quantile_levels(p.levels, p.top, p.fpr)
        pop_s = hinge_score(view.model.log_proba(view.population_X), view.population_y)
        features = self._features(view.population_X, view.population_y, view.n_classes)
        net = fit_quantiles(features, pop_s, levels, p, view.seed % 2**63)
        with torch.no_grad():
            q = np.sort(net(self._features(view.challenge_X, view.challenge_y, view.n_classes)).double().numpy(), 1)
        s = hinge_score(view.model.log_proba(view.challenge_X), view.challenge_y)
        scores = level_of(s, q, levels)
        head = int(np.flatnonzero(np.isclose(levels, 1.0 - p.fpr))[0])
        return MembershipGuess(scores=scores, decisions=s > q[:, head])

    def _features(self, X: torch.Tensor, y: torch.Tensor, n_classes: int) -> torch.Tensor:
        X = X.reshape(len(X), -1).float()
        if not self.params.use_label:
            return X
        return torch.cat([X, torch.nn.functional.one_hot(y, n_classes).float()], dim=1)


@hookimpl
def register_attacks(register) -> None:  # noqa: ANN001
    register(QMIA)
