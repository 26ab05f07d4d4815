"""Upper bounds on the success of any reconstruction attack against a DP release, as functions of κ.

κ is the prior's mass within the success region of the best guess that ignores the model (1/n for a target
drawn uniformly from n candidates and "success" meaning the exact candidate). Every bound here is a
reconstruction-robustness (ReRo) bound for the add/remove relation the reconstruction game plays: the released
model comes from D⁻ ∪ {z}, and the comparison is with a model trained on D⁻ alone.

* ``dp_bound``: Balle, Cherubin & Hayes (2022), success ≤ e^ε·κ + δ for any (ε, δ)-DP mechanism.
* ``tradeoff_dp_bound``: the same guarantee read through the (ε, δ)-DP trade-off curve
  f(α) = max(0, 1 − δ − e^ε α, e^{−ε}(1 − δ − α)), success ≤ 1 − f(κ) (Kaissis, Hayes, Ziller & Rueckert 2023).
  Never larger than ``dp_bound``, and below 1 where e^ε·κ + δ is vacuous.
* ``gdp_bound``: Hayes, Mahloujifar & Balle (2023), Theorem for μ-GDP mechanisms: success ≤ Φ(Φ⁻¹(κ) + μ).
  Full-batch DP-SGD with noise multiplier σ for T steps is μ-GDP with μ = √T/σ (``arena.privacy.tradeoff.dpsgd_mu``).
* ``subsampled_gaussian_bound``: DP-SGD with Poisson sampling at rate q. The bound is 1 − f(κ) with f the
  trade-off curve between T-fold compositions of N(0, σ²) (without the target) and (1 − q)N(0, σ²) + qN(1, σ²)
  (with it), the dominating pair Hayes et al. use. They estimate it by Monte Carlo (``monte_carlo_bound``);
  here the reported figure is computed deterministically from dp_accounting's privacy-loss distribution
  (pessimistic discretisation; ``arena.privacy.tradeoff.pld_profile`` on this module's fixed grid) as inf over ε of
  e^ε·κ + δ(ε), taken over a grid of ε. Every ε on the grid gives
  a valid bound and the PLD's δ(ε) is an upper bound (taken over both add and remove directions), so the figure
  is a valid upper bound on the success of any attack; the Monte-Carlo estimate is kept for cross-checks.

The functions are pure; ``dpsgd_bound`` picks the Gaussian one that applies to a DP-SGD claim. Every bound but
``monte_carlo_bound`` (an estimate) is proved; the formulas themselves live in ``arena.privacy.tradeoff``.
"""

from __future__ import annotations

import math

import numpy as np

from arena.privacy.tradeoff import (
    EpsilonGrid,
    dpsgd_mu,
    eps_delta_line,
    eps_delta_tradeoff,
    gaussian_tradeoff,
    pld_profile,
)

_EPS_GRID: EpsilonGrid = (-2.0, 60.0, 6201)  # the ε over which inf_ε e^ε·κ + δ(ε) is taken
_DISCRETISATION = 1e-3


def _check_kappa(kappa: float) -> None:
    if not 0.0 <= kappa <= 1.0:
        raise ValueError(f"κ must lie in [0, 1], got {kappa}")


def dp_bound(epsilon: float, delta: float, kappa: float) -> float:
    """min(1, e^ε·κ + δ): Balle et al.'s bound on reconstruction success under (ε, δ)-DP."""
    _check_kappa(kappa)
    return eps_delta_line(epsilon, delta, kappa)


def tradeoff_dp_bound(epsilon: float, delta: float, kappa: float) -> float:
    """1 − f_{ε,δ}(κ) = min(1, e^ε·κ + δ, 1 − e^{−ε}(1 − δ − κ)): the tight ReRo bound of an (ε, δ)-DP guarantee,
    never above ``dp_bound``."""
    return min(dp_bound(epsilon, delta, kappa), float(1.0 - eps_delta_tradeoff(kappa, epsilon, delta)))


def gdp_bound(mu: float, kappa: float) -> float:
    """Φ(Φ⁻¹(κ) + μ) = 1 − G_μ(κ): Hayes, Mahloujifar & Balle's bound on reconstruction success for a μ-GDP
    mechanism."""
    _check_kappa(kappa)
    if mu < 0:
        raise ValueError("μ must be non-negative")
    if kappa in (0.0, 1.0):
        return kappa
    return float(1.0 - gaussian_tradeoff(kappa, mu))


def subsampled_gaussian_bound(kappa: float, noise_multiplier: float, sample_rate: float, steps: int) -> float:
    """inf_ε e^ε·κ + δ(ε) for DP-SGD (σ, q, T) from dp_accounting's PLD: a valid upper bound on the success."""
    _check_kappa(kappa)
    if not 0.0 < sample_rate <= 1.0 or steps < 1 or not noise_multiplier > 0:
        raise ValueError("need 0 < sample_rate <= 1, steps >= 1 and noise_multiplier > 0")
    if kappa in (0.0, 1.0):
        return kappa
    eps, delta = pld_profile(float(noise_multiplier), float(sample_rate), int(steps), "add_remove",
                             grid=_EPS_GRID, discretization=_DISCRETISATION)
    return float(min(1.0, np.min(np.exp(eps) * kappa + delta)))


def monte_carlo_bound(
    kappa: float, noise_multiplier: float, sample_rate: float, steps: int, samples: int = 100_000, seed: int = 0
) -> float:
    """Hayes et al.'s Monte-Carlo estimate of the DP-SGD bound: the power, at level κ, of the Neyman–Pearson test
    between N(0, σ²)^T (without the target) and ((1 − q)N(0, σ²) + qN(1, σ²))^T (with it).

    The threshold is the empirical (1 − κ)-quantile of the log-likelihood ratio under the first, the power the
    share of samples of the second above it. An estimate (sampling error of order 1/√samples), not a bound.
    """
    _check_kappa(kappa)
    rng = np.random.default_rng(seed)
    s, q = float(noise_multiplier), float(sample_rate)

    def log_ratio(o: np.ndarray) -> np.ndarray:
        step = (2.0 * o - 1.0) / (2.0 * s * s)
        return np.logaddexp(math.log1p(-q) if q < 1 else -np.inf, math.log(q) + step).sum(axis=1)

    null = log_ratio(rng.normal(0.0, s, size=(samples, steps)))
    shifted = rng.random((samples, steps)) < q
    alternative = log_ratio(rng.normal(0.0, s, size=(samples, steps)) + shifted)
    threshold = np.quantile(null, 1.0 - kappa)
    return float((alternative > threshold).mean())


def dpsgd_bound(kappa: float, noise_multiplier: float, sample_rate: float, steps: int) -> tuple[float, str]:
    """(bound, how it was computed) for DP-SGD: the GDP closed form at full batch, the PLD bound when subsampled."""
    if sample_rate >= 1.0:
        if steps < 0 or not noise_multiplier > 0:
            raise ValueError("need steps >= 0 and noise_multiplier > 0")
        mu = dpsgd_mu(noise_multiplier, steps)
        return gdp_bound(mu, kappa), f"Hayes et al. 2023, full batch: Φ(Φ⁻¹(κ) + μ), μ = √T/σ = {mu:.3g}"
    return (
        subsampled_gaussian_bound(kappa, noise_multiplier, sample_rate, steps),
        f"Hayes et al. 2023, Poisson-subsampled Gaussian (σ = {noise_multiplier:.3g}, q = {sample_rate:.3g}, "
        f"T = {steps}): 1 − f(κ) from dp_accounting's PLD",
    )
