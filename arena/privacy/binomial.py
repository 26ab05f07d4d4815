"""Binomial bounds: exact Clopper–Pearson intervals, and the true- and false-positive rates of one fixed test turned
into a lower bound on ε. Every estimator of this package counts through these; none re-derives a binomial tail.

**Why rates bound ε** (Jagielski, Ullman & Oprea 2020; Nasr et al. 2021). An (ε, δ)-DP mechanism bounds every test
between the two worlds: TPR ≤ e^ε·FPR + δ and TNR ≤ e^ε·FNR + δ. With one-sided Clopper–Pearson bounds at level α/2
each (Bonferroni), TPR_lo and FPR_hi hold together with probability ≥ 1 − α, so

    ε ≥ ε_lb = max(0, log((TPR_lo − δ)/FPR_hi), log((1 − FPR_hi − δ)/(1 − TPR_lo)))

with confidence 1 − α, *proved* for a test fixed before the counts are seen whose trials are independent.
``max_certifiable`` is the largest ε_lb a sample of that size can ever give (perfect separation).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

ALPHA = 0.05  # default level of every bound and verdict: 95% confidence
CONFIDENCE = 1 - ALPHA  # the two-sided intervals' default: 95%


def cp_lower(k: ArrayLike, n: int | np.ndarray, alpha: float) -> np.ndarray:
    """One-sided (1 − α) Clopper–Pearson lower bound on a binomial proportion from k successes of n:
    Beta⁻¹(α; k, n − k + 1), and 0 at k = 0. Vectorised over k (and n)."""
    from scipy.stats import beta  # here: importing scipy.stats costs ~1 s, and reading a board needs none

    k = np.asarray(k, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(k > 0, beta.ppf(alpha, np.maximum(k, 1), n - k + 1), 0.0)


def cp_upper(k: ArrayLike, n: int | np.ndarray, alpha: float) -> np.ndarray:
    """One-sided (1 − α) Clopper–Pearson upper bound: Beta⁻¹(1 − α; k + 1, n − k), and 1 at k = n."""
    from scipy.stats import beta

    k = np.asarray(k, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(k < n, beta.ppf(1 - alpha, k + 1, np.maximum(n - k, 1)), 1.0)


def clopper_pearson(k: ArrayLike, n: int, confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided exact (Clopper–Pearson) interval for a binomial proportion, k successes of n; vectorised over k:
    the one-sided ends at (1 − confidence)/2 each.

    The same interval as ``scipy.stats.binomtest(k, n).proportion_ci(confidence, method="exact")``.
    """
    tail = (1.0 - confidence) / 2
    return cp_lower(k, n, tail), cp_upper(k, n, tail)


def epsilon_from_rates(tpr_lo: ArrayLike, fpr_hi: ArrayLike, delta: float) -> np.ndarray:
    """max(0, log((TPR_lo − δ)/FPR_hi), log((1 − FPR_hi − δ)/(1 − TPR_lo))); a term whose numerator is not
    positive says nothing. Vectorised."""
    tpr_lo, fpr_hi = np.broadcast_arrays(np.asarray(tpr_lo, np.float64), np.asarray(fpr_hi, np.float64))
    out = np.zeros(tpr_lo.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        fwd = np.where(tpr_lo - delta > 0, np.log(np.maximum(tpr_lo - delta, 1e-300) / fpr_hi), 0.0)
        bwd = np.where(1 - fpr_hi - delta > 0,
                       np.log(np.maximum(1 - fpr_hi - delta, 1e-300) / (1 - tpr_lo)), 0.0)
    return np.maximum(out, np.maximum(fwd, bwd))


def epsilon_from_counts(tp: ArrayLike, n_pos: int, fp: ArrayLike, n_neg: int, delta: float,
                        alpha: float = ALPHA) -> np.ndarray:
    """ε_lb at confidence 1 − α from tp of n_pos positives and fp of n_neg negatives flagged by one *fixed* test:
    TPR_lo = cp_lower(tp, n_pos, α/2), FPR_hi = cp_upper(fp, n_neg, α/2) (Bonferroni), then
    ``epsilon_from_rates``."""
    check_counts(n_pos, n_neg, alpha, delta)
    return epsilon_from_rates(cp_lower(tp, n_pos, alpha / 2), cp_upper(fp, n_neg, alpha / 2), delta)


def max_certifiable(n_pos: int, n_neg: int, alpha: float = ALPHA, delta: float = 0.0) -> float:
    """The largest ε_lb ``epsilon_from_counts`` can ever give with n_pos positives and n_neg negatives: perfect
    separation, TPR_lo = (α/2)^(1/n_pos), FPR_hi = 1 − (α/2)^(1/n_neg). Below this no sample of that size can show
    anything; a claim above it cannot be refuted by such an audit."""
    return float(epsilon_from_counts(n_pos, n_pos, 0, n_neg, delta, alpha))


def check_counts(n_pos: int, n_neg: int, alpha: float, delta: float) -> None:
    """ValueError unless there are positives and negatives to count, 0 < α < 1 and 0 ≤ δ < 1."""
    if n_pos < 1 or n_neg < 1:
        raise ValueError(f"an ε lower bound needs positives and negatives, got {n_pos} and {n_neg}")
    if not 0 < alpha < 1 or not 0 <= delta < 1:
        raise ValueError(f"need 0 < alpha < 1 and 0 <= delta < 1, got {alpha} and {delta}")
