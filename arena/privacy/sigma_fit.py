"""The parametric σ fit: the white-box Dirac-canary audit of Poisson-subsampled DP-SGD, where the Gaussian fit's
hypothesis fails (the movement is a Gaussian mixture) but its first two moments are still known exactly.

**Model.** A Dirac gradient canary of norm C, included, is sampled in each of T steps w.p. q and adds C to its
coordinate's clipped sum; the noise adds N(0, σ²C²) every step. In units of the step's scale the coordinate's
movement is B + N(0, Tσ²) with B ~ Binomial(T, q) when included and N(0, Tσ²) when not: mean difference qT,
variances Tσ² + Tq(1 − q) and Tσ². With a fraction w of the canaries included, Cohen's d (pooled variance) is

    d(σ) = q√T / √(σ² + w·q(1 − q)),                          (w = ½: q√T/√(σ² + q(1 − q)/2))

decreasing in σ. So a lower confidence bound d_lo on d bounds σ from above, σ ≤ σ_hi = √(q²T/d_lo² − w·q(1 − q)),
and DP-SGD at (σ_hi, q, T) has ε ≥ ε_opt(σ_hi) (dp_accounting's *optimistic* PLD: a lower bound on that
mechanism's ε), the figure reported. At q = 1 it is the Gaussian fit (d = √T/σ = μ).

**Status.** *Proved* under the model (noise Gaussian, canary coordinate fed by the canary alone, the release the
trained parameters): the standard error is the delta-method one with the sample's own third and fourth moments
(``cohens_d``; valid for the mixture, equal to the normal-theory one for Gaussian scores). Linear optimisers
(momentum, decay, averaging) weight the steps, which lowers d (Cauchy–Schwarz) and so only loosens the bound;
centring against the other models' movement adds variance: also conservative. Data gradients reaching the
coordinate are measured, not proved (as for the Gaussian fit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import ndtri  # norm.isf(α) = −ndtri(α); importing scipy.stats costs 0.8 s

from arena.privacy.binomial import ALPHA


def cohens_d(scores: ArrayLike, truth: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """(d̂, se) [R] of R experiments: Cohen's d of the included over the excluded scores (pooled variance) and its
    delta-method standard error from the sample moments (no normality assumed):
    Var d̂ ≈ Var(D)/S² + D²·Var(S²)/(4S⁶) − D·Cov(D, S²)/S⁴, D the mean difference, S² the pooled variance."""
    s = np.atleast_2d(np.asarray(scores, np.float64))
    t = np.broadcast_to(np.atleast_2d(np.asarray(truth).astype(bool)), s.shape)
    n1, n2 = t.sum(1), (~t).sum(1)
    if np.any(n1 < 2) or np.any(n2 < 2):
        raise ValueError("a fit needs at least two included and two excluded canaries")
    n = n1 + n2
    m1 = np.where(t, s, 0.0).sum(1) / n1
    m2 = np.where(t, 0.0, s).sum(1) / n2
    dev = np.where(t, s - m1[:, None], s - m2[:, None])
    moments = {}
    for k in (2, 3, 4):
        p = dev**k
        moments[k] = (np.where(t, p, 0.0).sum(1) / n1, np.where(t, 0.0, p).sum(1) / n2)
    (v1, v2), (c1, c2), (q1, q2) = moments[2], moments[3], moments[4]
    s2 = (n1 * v1 + n2 * v2) / (n - 2)
    diff = m1 - m2
    var_d = v1 / n1 + v2 / n2
    var_s2 = (n1 * (q1 - v1**2) + n2 * (q2 - v2**2)) / n**2
    cov = (c1 - c2) / n
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.where(s2 > 0, diff / np.sqrt(s2), np.where(diff > 0, np.inf, 0.0))
        var = var_d / s2 + diff**2 * var_s2 / (4 * s2**3) - diff * cov / s2**2
    return d, np.sqrt(np.maximum(np.where(np.isfinite(var), var, 0.0), 0.0))


def dpsgd_cohens_d(noise_multiplier: float, sample_rate: float, steps: int, included: float = 0.5) -> float:
    """d(σ) = q√T/√(σ² + w·q(1 − q)) of a Dirac canary in DP-SGD (w: the fraction of canaries included)."""
    q = sample_rate
    denom = math.sqrt(noise_multiplier**2 + included * q * (1 - q))
    return math.inf if denom == 0 else q * math.sqrt(steps) / denom


def sigma_upper(d_lo: np.ndarray | float, sample_rate: float, steps: int, included: float = 0.5) -> np.ndarray:
    """σ_hi = √(q²T/d_lo² − w·q(1 − q)), the largest σ whose d(σ) reaches d_lo (∞ for d_lo ≤ 0, 0 where even
    σ = 0 falls short of d_lo). Vectorised."""
    q = sample_rate
    d = np.asarray(d_lo, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        sq = np.where(d > 0, q * q * steps / d**2 - included * q * (1 - q), np.inf)
    return np.sqrt(np.maximum(sq, 0.0))


@dataclass(frozen=True)
class SigmaFit:
    """σ ≤ ``sigma_hi`` with confidence 1 − ``alpha`` (d ≥ ``d_lo`` = ``d_hat`` − z·``se``) for DP-SGD at the
    recorded q and T, hence ε ≥ ``epsilon`` (the optimistic PLD ε of (σ_hi, q, T) at ``delta``; 0 without
    evidence, ∞ if even σ = 0 cannot explain the scores)."""

    epsilon: float
    d_hat: float
    d_lo: float
    se: float
    sigma_hi: float
    sample_rate: float
    steps: int
    alpha: float
    delta: float
    n_pos: int
    n_neg: int
    method: str = "σ fit (Cohen's d of Dirac canaries, Poisson-subsampled DP-SGD)"


def sigma_fit(scores: ArrayLike, truth: ArrayLike, sample_rate: float, steps: int, delta: float,
              alpha: float = ALPHA) -> SigmaFit:
    """``SigmaFit`` of one experiment's white-box canary scores (higher: included) for a claim recording q, T."""
    from arena.privacy.accounting import epsilon_optimistic

    t = np.asarray(truth).astype(bool).reshape(-1)
    d, se = cohens_d(np.asarray(scores, np.float64).reshape(1, -1), t)
    lo = float(d[0] + ndtri(alpha) * se[0])
    w = float(t.mean())
    sigma = float(sigma_upper(lo, sample_rate, steps, w))
    if lo <= 0 or math.isinf(sigma):
        eps = 0.0
    elif sigma == 0:
        eps = math.inf
    else:
        eps = epsilon_optimistic(sigma, sample_rate, steps, delta)
    return SigmaFit(eps, float(d[0]), lo, float(se[0]), sigma, sample_rate, steps, alpha, delta,
                    int(t.sum()), int((~t).sum()))
