"""Gaussian differential privacy: μ ↔ (ε, δ), and two audits that assume a Gaussian trade-off, the one-threshold
estimate (*measured*, never a verdict) and the Gaussian fit (*proved* where its hypothesis holds exactly).

**Conversion** (Dong, Roth & Su 2022, "Gaussian Differential Privacy", Corollary 2.13): μ-GDP is (ε, δ(ε))-DP for
every ε with δ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2) (``gdp_delta``; ``gdp_epsilon`` and ``gdp_mu`` invert it).
The μ of full-batch DP-SGD from (σ, T) is ``arena.privacy.tradeoff.dpsgd_mu``; the trade-off curve G_μ is
``arena.privacy.tradeoff.gaussian_tradeoff``.

**Gaussian-DP estimate** (``gdp_estimate``; Nasr, Hayes, Steinke, Balle, Tramèr, Jagielski, Carlini & Terzis
2023, "Tight Auditing of Differentially Private Machine Learning", USENIX Security 2023; Dong, Roth & Su 2022,
Eq. 6). If the mechanism is μ-GDP, every test has FNR ≥ Φ(Φ⁻¹(1 − FPR) − μ), hence with confidence 1 − α
(held-out threshold, one-sided Clopper–Pearson at α/2 on FPR and FNR)

    μ ≥ μ_lo = Φ⁻¹(1 − FPR_hi) − Φ⁻¹(FNR_hi),

converted to ε at δ by ``gdp_epsilon``. It is an *estimate*: it assumes the mechanism's trade-off curve is
Gaussian (true of DP-SGD's white-box worst case), so it is never the basis of a verdict here.

**Gaussian-fit bound** (``gaussian_bound``; the parametric form of Nasr et al. 2023's white-box audit). When the
scores are Gaussian with one variance, N(a, s²) for excluded and N(a + μs, s²) for included canaries, and
independent, the best test between the two is μ-GDP exactly, and μ̂ = (mean_in − mean_out)/pooled s is Cohen's d,
with standard error se = √((n₁ + n₂)/(n₁n₂) + μ̂²/(2(n₁ + n₂))); with confidence 1 − α, μ ≥ μ_lo = μ̂ − z_α·se,
so the scores' trade-off is not above Φ(Φ⁻¹(1 − ·) − μ_lo), which an (ε, δ)-DP mechanism with
ε < ε(μ_lo, δ) cannot produce: ε ≥ ε(μ_lo, δ). The hypothesis holds *exactly* for the white-box Dirac gradient
canary of **full-batch** DP-SGD (sample rate 1): its coordinate's final movement is the sum of T steps of
±lr·C·bit plus N(0, (lr·σC)²) noise, Gaussian with μ = √T/σ for plain SGD and smaller for any linear optimiser
(momentum, weight decay, averaging: μ = Σw/(σ√Σw²) ≤ √T/σ by Cauchy–Schwarz). Data gradients that reach the
canary's coordinate add a drift that weakly couples the canaries; it lowered μ̂ in every case measured (the README
gives the figures), which is conservative, but that part is measured, not proved. It uses every score, not the
two counts at one threshold, so it resolves μ to ±z·se (about ±0.01 with 65,536 canaries) where a
Clopper–Pearson count at a tail threshold would need millions. With Poisson subsampling (q < 1) the movement is a
Gaussian mixture, the hypothesis fails and the figure is an estimate only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import log_ndtr, ndtri  # scipy.stats's norm is these; importing it costs 0.8 s

from arena.privacy.binomial import ALPHA, check_counts, cp_lower, cp_upper
from arena.privacy.heldout import Direction, as_batch, evaluate_test, select_test, split_halves


def gdp_delta(mu: float, epsilon: float) -> float:
    """δ(ε) of μ-GDP (Dong, Roth & Su, Corollary 2.13): Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2), in log space."""
    if mu <= 0:
        return 0.0
    a = log_ndtr(-epsilon / mu + mu / 2)
    b = epsilon + log_ndtr(-epsilon / mu - mu / 2)
    return float(np.exp(a) * -np.expm1(b - a)) if b < a else 0.0


def gdp_epsilon(mu: float, delta: float) -> float:
    """The ε at which μ-GDP is (ε, δ)-DP: the root of gdp_delta(μ, ε) = δ (0 if δ(0) ≤ δ)."""
    if mu <= 0 or gdp_delta(mu, 0.0) <= delta:
        return 0.0
    hi = 1.0
    while gdp_delta(mu, hi) > delta:
        hi *= 2
    from scipy.optimize import brentq  # here: scipy.optimize takes 0.5 s to import

    return float(brentq(lambda e: gdp_delta(mu, e) - delta, 0.0, hi, xtol=1e-10))


def gdp_mu(epsilon: float, delta: float) -> float:
    """The μ whose μ-GDP is exactly (ε, δ)-DP (inverse of ``gdp_epsilon`` in μ). Not full-batch DP-SGD's μ from
    (σ, T): that is ``arena.privacy.tradeoff.dpsgd_mu``."""
    hi = 1.0
    while gdp_epsilon(hi, delta) < epsilon:
        hi *= 2
    from scipy.optimize import brentq

    return float(brentq(lambda m: gdp_epsilon(m, delta) - epsilon, 1e-9, hi, xtol=1e-10))


def gdp_mu_lower(tp: ArrayLike, n_pos: int, fp: ArrayLike, n_neg: int, alpha: float = ALPHA) -> np.ndarray:
    """μ_lo = Φ⁻¹(1 − FPR_hi) − Φ⁻¹(FNR_hi), FPR_hi and FNR_hi = 1 − TPR_lo one-sided Clopper–Pearson at α/2
    (Nasr et al. 2023). Vectorised; may be negative (no evidence)."""
    fpr_hi = cp_upper(fp, n_neg, alpha / 2)
    fnr_hi = 1.0 - cp_lower(tp, n_pos, alpha / 2)
    return -ndtri(fpr_hi) - ndtri(fnr_hi)


@dataclass(frozen=True)
class GdpEstimate:
    """The Gaussian-DP estimate at confidence 1 − ``alpha`` *if the trade-off is Gaussian*: μ ≥ ``mu_lo``, hence
    ε(δ) ≥ ``epsilon``; threshold chosen on the selection half, counted on the evaluation half. Measured, not
    proved: never the basis of a verdict."""

    epsilon: float
    mu_lo: float
    alpha: float
    delta: float
    direction: Direction
    true_positives: int
    false_positives: int
    n_pos: int
    n_neg: int
    method: str = "Gaussian DP (Nasr et al. 2023), held-out threshold"


def gdp_estimate(scores: ArrayLike, truth: ArrayLike, delta: float, alpha: float = ALPHA,
                 seed: int = 0) -> GdpEstimate:
    """The Gaussian-DP estimate of Nasr et al. 2023 with the threshold (and side) chosen on a held-out half."""
    scores, truth = as_batch(scores, truth)
    sel = split_halves(truth, seed)

    def objective(tp: np.ndarray, n_pos: int, fp: np.ndarray, n_neg: int) -> np.ndarray:
        lo = cp_lower(np.arange(n_pos + 1), n_pos, alpha / 2)
        hi = cp_upper(np.arange(n_neg + 1), n_neg, alpha / 2)
        return -ndtri(hi[fp]) - ndtri(1.0 - lo[tp])

    sign, t = select_test(scores, truth, sel, objective)
    tp, fp, n_pos, n_neg = evaluate_test(scores, truth, ~sel, sign, t)
    check_counts(n_pos, n_neg, alpha, delta)
    mu = float(gdp_mu_lower(tp, n_pos, fp, n_neg, alpha)[0])
    eps = gdp_epsilon(mu, delta) if mu > 0 else 0.0
    return GdpEstimate(epsilon=eps, mu_lo=mu, alpha=alpha, delta=delta,
                       direction=("higher" if sign[0] > 0 else "lower") if mu > 0 else "",
                       true_positives=int(tp[0]), false_positives=int(fp[0]), n_pos=n_pos, n_neg=n_neg)


@dataclass(frozen=True)
class GaussianBound:
    """The Gaussian-fit bound at confidence 1 − ``alpha``: μ ≥ ``mu_lo`` = ``mu_hat`` − z·``se``, hence
    ε(δ) ≥ ``epsilon`` (0 without evidence), *if* the scores are Gaussian with one variance (see the module
    docstring for when that holds exactly)."""

    epsilon: float
    mu_hat: float
    mu_lo: float
    se: float
    alpha: float
    delta: float
    n_pos: int
    n_neg: int
    method: str = "Gaussian fit (Nasr et al. 2023, white-box, full batch)"


def gaussian_mu_batch(scores: ArrayLike, truth: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """(μ̂, se) [R] of R experiments at once: Cohen's d of the included over the excluded scores (pooled standard
    deviation) and its normal-approximation standard error. ``scores`` [R, n] (or [n]), ``truth`` the same or [n]."""
    s = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    t = np.broadcast_to(np.atleast_2d(np.asarray(truth).astype(bool)), s.shape)
    n1, n2 = t.sum(1), (~t).sum(1)
    if np.any(n1 < 2) or np.any(n2 < 2):
        raise ValueError("a Gaussian fit needs at least two included and two excluded canaries")
    m1 = np.where(t, s, 0.0).sum(1) / n1
    m2 = np.where(t, 0.0, s).sum(1) / n2
    ss = np.where(t, s - m1[:, None], s - m2[:, None]) ** 2
    pooled = np.sqrt(ss.sum(1) / (n1 + n2 - 2))
    diff = m1 - m2
    with np.errstate(divide="ignore", invalid="ignore"):
        mu = np.where(pooled > 0, diff / pooled, np.where(diff > 0, np.inf, 0.0))
    finite = np.where(np.isfinite(mu), mu, 0.0)
    se = np.sqrt((n1 + n2) / (n1 * n2) + finite**2 / (2 * (n1 + n2)))
    return mu, se


def gaussian_bound(scores: ArrayLike, truth: ArrayLike, delta: float, alpha: float = ALPHA) -> GaussianBound:
    """``GaussianBound`` of one experiment's scores (higher: included) and truths."""
    t = np.asarray(truth).astype(bool).reshape(-1)
    mu, se = gaussian_mu_batch(np.asarray(scores, dtype=np.float64).reshape(1, -1), t)
    lo = float(mu[0] + ndtri(alpha) * se[0])
    eps = (math.inf if math.isinf(lo) else gdp_epsilon(lo, delta)) if lo > 0 else 0.0
    return GaussianBound(eps, float(mu[0]), lo, float(se[0]), alpha, delta, int(t.sum()), int((~t).sum()))


def gaussian_kind(sample_rate: float | None, kinds: Sequence[str]) -> str | None:
    """The kind whose Gaussian-fit bound joins the verdict: the white-box gradient canaries of a full-batch claim
    (``sample_rate`` 1), whose scores are then Gaussian (see the module docstring); None otherwise."""
    full_batch = sample_rate is not None and float(sample_rate) >= 1.0
    return "gradient" if full_batch and "gradient" in kinds else None


def gaussian_flags(scores: ArrayLike, truth: ArrayLike, claimed_epsilon: float, delta: float,
                   alpha: float = ALPHA) -> np.ndarray:
    """[R] booleans: the Gaussian-fit bound at level α exceeds ``claimed_epsilon`` (μ_lo above the μ whose GDP is
    exactly (claimed ε, δ)-DP), for R experiments at once (the calibration tests simulate it)."""
    mu, se = gaussian_mu_batch(scores, truth)
    return mu + ndtri(alpha) * se > gdp_mu(claimed_epsilon, delta)
