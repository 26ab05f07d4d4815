"""The formulas of the built-in output-based membership attacks, each once: LiRA's statistic and likelihood ratio
(Carlini et al. 2022) and RMIA's probability ratios and scores (Zarifzadeh et al. 2024). Pure functions of model
outputs (logits, log-probabilities or losses) and reference models' membership masks: the ``lira`` and ``rmia``
plugins call them on the outputs of the models they query, ``arena evaluate-outputs`` (``arena.evaluate_outputs``)
on outputs a user saved, so that both give the same scores on the same outputs."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import log_ndtr, logsumexp

# --- LiRA --------------------------------------------------------------------------------------------------------


def log_odds(logits: torch.Tensor) -> torch.Tensor:
    """log(p_j / (1 - p_j)) of every class j, float64 [..., C], from logits or log-probabilities [..., C].

    log(1 - p_j) is the log-sum-exp of the other classes' logits (minus the same normaliser as log p_j), so
    nothing is computed as ``1 - p``, which rounds to zero for a confident model.
    """
    z = logits.double()
    own = torch.eye(z.shape[-1], dtype=torch.bool, device=z.device)
    return z - torch.logsumexp(z.unsqueeze(-2).masked_fill(own, -math.inf), dim=-1)


def true_class_log_odds(logits: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """LiRA's statistic φ = log(p_y / (1 - p_y)) of the true class, float64 [...], computed as ``log_odds`` does;
    ``y`` [n] is shared by a leading model axis of ``logits`` [K, n, C]."""
    z = logits.double()
    idx = y.expand(z.shape[:-1]).unsqueeze(-1)
    others = z.scatter(-1, idx, -math.inf)
    return (z.gather(-1, idx).squeeze(-1) - torch.logsumexp(others, dim=-1)).numpy()


def loss_log_odds(loss: np.ndarray) -> np.ndarray:
    """φ = log(p_y / (1 - p_y)) from the cross-entropy loss = −log p_y, float64: −loss − log(1 − e^(−loss)); a
    loss of 0 (p_y rounded to 1) counts as the smallest positive double, so φ stays finite (about 708)."""
    loss = np.maximum(np.asarray(loss, dtype=np.float64), np.finfo(np.float64).tiny)
    return -loss - np.log(-np.expm1(-loss))


MIN_STD = 1e-6
"""Floor on a fitted standard deviation, so a point every shadow scores alike still gets a finite density."""


@dataclass(frozen=True)
class Gaussians:
    """One normal distribution per challenge point (means and standard deviations [n])."""

    mean: np.ndarray
    std: np.ndarray

    def logpdf(self, x: np.ndarray) -> np.ndarray:
        z = (x - self.mean) / self.std
        return -0.5 * z * z - np.log(self.std) - 0.5 * math.log(2 * math.pi)

    def logcdf(self, x: np.ndarray) -> np.ndarray:
        return log_ndtr((x - self.mean) / self.std)


def fit_gaussians(values: np.ndarray, mask: np.ndarray, fixed_variance: bool) -> Gaussians:
    """Per column of ``values`` [K, n]: the maximum-likelihood normal of the entries where ``mask`` is True.
    With ``fixed_variance`` every column shares one variance, pooled from all columns' residuals (LiRA's choice
    when there are few shadows per point)."""
    counts = mask.sum(axis=0)
    if np.any(counts == 0):
        raise ValueError("every point needs at least one shadow value to fit a Gaussian")
    mean = np.where(mask, values, 0.0).sum(axis=0) / counts
    squares = np.where(mask, (values - mean) ** 2, 0.0)
    var = np.full(values.shape[1], squares.sum() / counts.sum()) if fixed_variance else squares.sum(axis=0) / counts
    return Gaussians(mean, np.maximum(np.sqrt(var), MIN_STD))


def likelihood_ratio(
    shadow_phi: np.ndarray, shadow_in: np.ndarray, phi: np.ndarray, fixed_variance: bool
) -> np.ndarray:
    """Online LiRA score per point: log N(φ; IN fit) - log N(φ; OUT fit), the fits over the shadows [K, n] that
    did (``shadow_in``) and did not train on each point."""
    fit_in = fit_gaussians(shadow_phi, shadow_in, fixed_variance)
    return fit_in.logpdf(phi) - fit_gaussians(shadow_phi, ~shadow_in, fixed_variance).logpdf(phi)


def one_sided_out(
    shadow_phi: np.ndarray, shadow_out: np.ndarray, phi: np.ndarray, fixed_variance: bool
) -> np.ndarray:
    """Offline LiRA score per point: log Pr[Z <= φ] for Z the normal fitted over the OUT shadows (high φ, that is
    a confidence the OUT models rarely reach, means member)."""
    return fit_gaussians(shadow_phi, shadow_out, fixed_variance).logcdf(phi)


def population_references(shadow_in: np.ndarray, paired: bool | None = None) -> slice:
    """The references whose outputs on population records (outside every reference) an offline test reads: one
    of each complementary pair when the references [K, n] come in pairs (reference 2j+1 trained on the points 2j
    did not, as the arena's pools always do: ``paired=True``; None: seen in ``shadow_in``), as many as a challenge
    point's OUT references; else all."""
    k = shadow_in.shape[0]
    if paired is None:
        paired = k % 2 == 0 and k > 0 and bool(np.all(shadow_in[0::2] == ~shadow_in[1::2]))
    return slice(0, None, 2) if paired else slice(None)


# --- RMIA --------------------------------------------------------------------------------------------------------


def true_class_log_prob(log_probs: torch.Tensor, y: torch.Tensor, temperature: float) -> np.ndarray:
    """log Pr(x|θ) = log softmax(logits / T)[y], float64 [..., n], from logits or log-probabilities [..., n, C]
    (they differ by a constant per row, which the softmax removes); ``y`` [n] is shared by leading axes."""
    z = torch.log_softmax(log_probs.double() / temperature, dim=-1)
    return z.gather(-1, y.expand(z.shape[:-1]).unsqueeze(-1)).squeeze(-1).numpy()


def log_mean_prob(log_p: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """log of the mean over the references [K, n] where ``mask`` is True of Pr = exp(``log_p``), per column [n]."""
    counts = mask.sum(axis=0)
    if np.any(counts == 0):
        raise ValueError("every point needs at least one reference model")
    return logsumexp(np.where(mask, log_p, -np.inf), axis=0) - np.log(counts)


def offline_log_prob(log_p_out: np.ndarray, a: float) -> np.ndarray:
    """log Pr(x) = log ½((1 + a)·Pr_OUT(x) + (1 - a)) from log Pr_OUT(x): the paper's offline approximation."""
    return np.logaddexp(math.log1p(a) + log_p_out, math.log1p(-a) if a < 1 else -np.inf) - math.log(2.0)


def fit_a(log_p_in: np.ndarray, log_p_out: np.ndarray) -> float:
    """The a of Pr_IN ≈ a·Pr_OUT + (1 − a) that fits the points best (least squares of 1 − Pr_IN = a·(1 − Pr_OUT)
    through the origin: a = Σ(1 − Pr_OUT)(1 − Pr_IN) / Σ(1 − Pr_OUT)²), in [0, 1]; 1 where Pr_OUT = 1 throughout."""
    gap_in, gap_out = -np.expm1(log_p_in), -np.expm1(log_p_out)
    norm = float(np.sum(gap_out**2))
    return 1.0 if norm == 0 else float(np.clip(np.sum(gap_out * gap_in) / norm, 0.0, 1.0))


OFFLINE_A = 0.3
"""Offline RMIA's default a (ML Privacy Meter's)."""


def rmia_ratios(x_target: np.ndarray, x_refs: np.ndarray, x_in: np.ndarray, z_target: np.ndarray,
                z_refs: np.ndarray, variant: str, a: float | None,
                paired: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """RMIA's log ratios log(Pr(x|θ)/Pr(x)) [n] of the points and log(Pr(z|θ)/Pr(z)) [m] of the population records,
    from log Pr(·|θ) of the target (``x_target`` [n], ``z_target`` [m]) and of the references (``x_refs`` [K, n],
    ``z_refs`` [K, m]), ``x_in`` [K, n] the references' membership of the points (population records are outside
    every reference). Online, Pr(x) = ½(Pr_IN + Pr_OUT) and ``a`` (None) is fitted on the points; offline, Pr(x)
    is the ``a`` approximation of Pr_OUT (None: ``OFFLINE_A``) and z's references are ``population_references``
    (``paired`` as there).
    Population records' Pr(z) is the ``a`` approximation in both variants."""
    x_out = log_mean_prob(x_refs, ~x_in)
    if variant == "online":
        x_in_mean = log_mean_prob(x_refs, x_in)
        x_norm = np.logaddexp(x_in_mean, x_out) - math.log(2.0)  # ½(Pr_IN + Pr_OUT)
        a = fit_a(x_in_mean, x_out) if a is None else a
    else:
        a = OFFLINE_A if a is None else a
        x_norm = offline_log_prob(x_out, a)
        z_refs = z_refs[population_references(x_in, paired)]
    z_norm = offline_log_prob(log_mean_prob(z_refs, np.ones(z_refs.shape, dtype=bool)), a)
    return x_target - x_norm, z_target - z_norm


def rmia_counts(log_ratio_x: np.ndarray, log_ratio_z: np.ndarray, gamma: float) -> np.ndarray:
    """|{z : LR(x, z) ≥ γ}| for each x (Eq. 4 times |Z|), given log(Pr(x|θ)/Pr(x)) [n] and log(Pr(z|θ)/Pr(z)) [m]:
    LR(x, z) ≥ γ ⇔ log ratio_z ≤ log ratio_x − log γ, counted by binary search."""
    return np.searchsorted(np.sort(log_ratio_z), log_ratio_x - math.log(gamma), side="right")


def rmia_scores(log_ratio_x: np.ndarray, log_ratio_z: np.ndarray, gamma: float) -> np.ndarray:
    """Eq. 4 with ties broken by the likelihood ratio: (c + u)/(|Z| + 1) for each x, c = ``rmia_counts`` and, with
    t = log ratio_x − log γ between the sorted population ratios z₍c₎ ≤ t < z₍c₊₁₎, u = (t − z₍c₎)/(z₍c₊₁₎ − z₍c₎);
    below every z, u = exp(t − z₍₁₎); above every z, u = 1 − exp(z₍|Z|₎ − t). Continuous and strictly increasing
    in t, in [0, 1); its integer part (times |Z| + 1) is the count."""
    z = np.sort(log_ratio_z)
    m, t = len(z), log_ratio_x - math.log(gamma)
    c = np.searchsorted(z, t, side="right")
    lo, hi = z[np.maximum(c - 1, 0)], z[np.minimum(c, m - 1)]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        inner = (t - lo) / (hi - lo)
        u = np.where(c == 0, np.exp(t - z[0]), np.where(c == m, -np.expm1(z[-1] - t), inner))
    return (c + np.clip(u, 0.0, np.nextafter(1.0, 0.0))) / (m + 1)
