"""The f-DP one-run bound (Mahloujifar, Melis & Chaudhuri 2025, "Auditing f-Differential Privacy in One Run",
ICML 2025): the one-run experiment of Steinke et al. (canaries each included w.p. ½, guesses on r of the m
canaries, v correct) tested against a whole trade-off curve f instead of one (ε, δ) pair, *proved* for any
mechanism that is f-DP in each canary's bit (f symmetric).

**The test** (``fdp_rejects``; the paper's recursion with a cap on the number of guesses, as jax_privacy 2.x and
Meta's PrivacyGuard implement it). With f̄(x) = f(1 − x) (the least probability, in one world, of an event of
probability x in the other), level τ and r guesses of which v are right, start from

    r_v = τ·v/m,  h_v = τ·(r − v)/m,

and for i = v − 1, …, 0 set h_i = max(h_{i+1}, f̄(r_{i+1})), r_i = min(1, r_{i+1} + i/(r − i)·(h_i − h_{i+1})).
If r_0 + h_0 > r/m, no f-DP mechanism makes v or more of the r guesses right with probability τ: f is rejected at
level τ. The recursion stops as soon as h stops growing (nothing changes after that); it takes tens to hundreds of
steps. Rejection is monotone in f (a larger f̄ only grows h and r), so for a family of curves ordered by privacy
the rejected members form an interval found by bisection.

**Curves** (``Fbar``: x ↦ f(1 − x), vectorised): μ-GDP (``gdp_fbar``: Φ(Φ⁻¹(x) − μ)); a privacy profile δ(ε) on
a grid, e.g. Poisson-subsampled DP-SGD's from dp_accounting's PLD (``profile_fbar``: its dual f, tabulated on a
fine grid of x and read at the nearest grid point below x, so never above the exact f̄: conservative); a recorded
DP-SGD claim (``claim_fbar``: GDP with μ = √T/σ at q = 1, the PLD profile otherwise).

**Uses.** Against the *claim's own curve* (the σ, q and T it records) a rejection refutes the claim as made: the
release is not the mechanism its accounting describes; this joins the audit's verdict. Against the GDP family it
gives the largest μ rejected and ε(μ, δ) (``gdp_family_epsilon``, jax_privacy's ``epsilon_one_run_fdp``): an
*estimate* of ε that assumes the trade-off is Gaussian, shown beside the verdict. Against the (ε, δ)-DP family
(``eps_delta_fbar``) it gives the largest ε rejected (``largest_rejected_epsilon``): a lower bound on ε that
assumes nothing about the mechanism, beside the one-run bound in the audit's headline.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import ndtr, ndtri

from arena.privacy.binomial import ALPHA
from arena.privacy.heldout import as_batch
from arena.privacy.one_run import guess_grid, one_run_counts, scale_guess_set, selection_half

Fbar = Callable[[float], float]
"""x ↦ f(1 − x) for the trade-off function f under test (non-decreasing, f̄(x) ≤ x)."""

FBAR_GRID = 20_000  # points of the log-spaced x grid a tabulated curve is read on


def fdp_rejects(m: int, r: int, v: int, tau: float, fbar: Fbar) -> bool:
    """Whether ``v`` or more correct of ``r`` guesses on ``m`` canaries has probability below τ under every
    mechanism whose trade-off function is at least f (``fbar``: x ↦ f(1 − x)): the test at level τ."""
    if not 0 <= v <= r <= m or r == 0:
        raise ValueError(f"need 0 <= v <= r <= m and r > 0, got v={v}, r={r}, m={m}")
    rr, h = tau * v / m, tau * (r - v) / m
    for i in range(v - 1, -1, -1):
        h_new = max(h, fbar(rr))
        if h_new == h:
            break
        rr, h = min(rr + i / (r - i) * (h_new - h), 1.0), h_new
    return rr + h > r / m


def gdp_fbar(mu: float) -> Fbar:
    """f̄ of μ-GDP: x ↦ Φ(Φ⁻¹(x) − μ) (0 for μ = ∞, the identity for μ = 0)."""
    if math.isinf(mu):
        return lambda x: 0.0
    return lambda x: float(ndtr(ndtri(x) - mu))


def profile_fbar(epsilons: ArrayLike, deltas: ArrayLike) -> Fbar:
    """f̄ of a mechanism that is (ε_i, δ_i)-DP for every point of a privacy profile: the dual trade-off
    f(α) = sup_i max(0, 1 − δ_i − e^{ε_i}α, e^{−ε_i}(1 − δ_i − α)) (Dong, Roth & Su 2022, Prop. 2.12) at 1 − x,
    tabulated on ``FBAR_GRID`` log-spaced x and read at the largest grid point at or below x (f̄ is
    non-decreasing, so the value read is never above the exact one)."""
    from arena.privacy.tradeoff import tradeoff_from_profile

    xs = np.concatenate([[0.0], np.logspace(-15, 0, FBAR_GRID)])
    table = tradeoff_from_profile(1.0 - xs, np.asarray(epsilons, np.float64), np.asarray(deltas, np.float64))
    table = np.maximum.accumulate(np.minimum(table, xs))  # f̄(x) ≤ x and non-decreasing (rounding at 1 − x)

    def fbar(x: float) -> float:
        return float(table[max(0, int(np.searchsorted(xs, x, side="right")) - 1)])

    return fbar


PROFILE_DISCRETIZATION = 1e-3
"""The PLD discretisation of a subsampled claim's curve here: ten times coarser than the report's curves (0.7 s
instead of 6 s of CPU at T = 250); a pessimistic PLD at any discretisation bounds δ(ε) from above, so the curve
is only lowered, never raised: the test stays valid, slightly less powerful."""


@functools.lru_cache(maxsize=32)  # one curve per claim: every seed and kind of a matchup's claim asks for it
def claim_fbar(noise_multiplier: float, sample_rate: float, steps: int) -> Fbar:
    """f̄ of DP-SGD as a claim records it (add/remove): μ-GDP with μ = √T/σ at q = 1, else the dual of
    dp_accounting's pessimistic PLD profile."""
    from arena.privacy.tradeoff import dpsgd_mu, pld_profile

    if sample_rate >= 1.0 or steps == 0 or noise_multiplier == 0:
        return gdp_fbar(dpsgd_mu(noise_multiplier, steps))
    eps, deltas = pld_profile(float(noise_multiplier), float(sample_rate), int(steps),
                              discretization=PROFILE_DISCRETIZATION)
    return profile_fbar(eps, deltas)


def eps_delta_fbar(epsilon: float, delta: float) -> Fbar:
    """f̄ of (ε, δ)-DP: x ↦ f(1 − x) with f(α) = max(0, 1 − δ − e^ε·α, e^{−ε}·(1 − δ − α)) (Kairouz et al.)."""
    e = math.exp(min(epsilon, 700.0))
    return lambda x: max(0.0, 1.0 - delta - e * (1.0 - x), (x - delta) / e)


def largest_rejected_epsilon(m: int, r: int, v: int, tau: float, delta: float, hi: float = 64.0,
                             tol: float = 1e-4) -> float:
    """The largest ε whose (ε, δ)-DP trade-off curve the test rejects at level τ (0 if none): a lower bound on ε
    that assumes nothing about the mechanism (every (ε, δ)-DP one has a trade-off at least that curve), found by
    bisection (rejection is monotone in ε); within ``tol`` below the exact one, so still valid."""
    if v == 0 or not fdp_rejects(m, r, v, tau, eps_delta_fbar(0.0, delta)):
        return 0.0
    if fdp_rejects(m, r, v, tau, eps_delta_fbar(hi, delta)):
        return hi
    lo = 0.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fdp_rejects(m, r, v, tau, eps_delta_fbar(mid, delta)) else (lo, mid)
    return lo


def largest_rejected_mu(m: int, r: int, v: int, tau: float, hi: float = 64.0, tol: float = 1e-9) -> float:
    """The largest μ whose μ-GDP the test rejects (0 if none): bisection, the rejected μ forming [0, μ*)."""
    if v == 0 or not fdp_rejects(m, r, v, tau, gdp_fbar(0.0)):
        return 0.0
    lo = 0.0
    if fdp_rejects(m, r, v, tau, gdp_fbar(hi)):
        return hi
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fdp_rejects(m, r, v, tau, gdp_fbar(mid)) else (lo, mid)
    return lo


def gdp_family_epsilon(m: int, r: int, v: int, tau: float, delta: float, tol: float = 1e-7) -> float:
    """The largest ε whose (ε, δ)-equivalent μ-GDP the test rejects: jax_privacy's ``epsilon_one_run_fdp`` at one
    threshold; an estimate that assumes a Gaussian trade-off. ε(μ, δ) increases with μ, so it is ε at the
    largest rejected μ (bisection on μ to ``tol``)."""
    from arena.privacy.gdp import gdp_epsilon

    mu = largest_rejected_mu(m, r, v, tau, tol=tol)
    return gdp_epsilon(mu, delta) if mu > 0 else 0.0


@dataclass(frozen=True)
class FdpBound:
    """The f-DP one-run analysis of one canary kind, counted on ``m`` canaries at level ``alpha`` with r guesses
    (k₊ "in", k₋ "out") of which v are right. ``epsilon``: the largest ε whose (ε, δ)-DP curve is rejected, an
    assumption-free lower bound; ``claim_refuted``: the claim's own curve rejected (None without a recorded
    mechanism); ``gdp_epsilon``: the GDP-family estimate at ``delta`` (assumes a Gaussian trade-off);
    ``max_gdp_epsilon``: that estimate if every guess were right. The claim's curve lies above the (ε, δ) curve
    of its own ε, so ``epsilon`` above the claimed ε implies ``claim_refuted``: one test at ``alpha``, not two."""

    claim_refuted: bool | None
    gdp_epsilon: float
    max_gdp_epsilon: float
    alpha: float
    delta: float
    m: int
    k_plus: int
    k_minus: int
    guesses: int
    correct: int
    epsilon: float = 0.0
    method: str = "f-DP one run (Mahloujifar, Melis & Chaudhuri 2025)"


def fdp_one_run(scores: ArrayLike, truth: ArrayLike, alpha: float = ALPHA, delta: float = 1e-5,
                claim: Fbar | None = None, seed: int = 0) -> FdpBound:
    """The f-DP one-run analysis with the guess set chosen on a held-out half (the one-run bound's
    ``selection_half`` and guess grid, chosen by the GDP estimate there) and counted on the other half at level
    α: the claim's curve ``claim`` tested (when given) and the GDP-family estimate."""
    s, t = as_batch(scores, truth, same_counts=False)
    s, t = s[:1], t[:1]
    n = s.shape[1]
    if n < 4:
        raise ValueError(f"an f-DP one-run bound needs at least 4 canaries, got {n}")
    sel = selection_half(n, seed)
    n_sel, n_ev = int(sel.sum()), int((~sel).sum())
    choices = guess_grid(n_sel)
    v, r = one_run_counts(s[:, sel], t[:, sel], choices, seed)
    mus = [largest_rejected_mu(n_sel, int(r[0, j]), int(v[0, j]), alpha, tol=1e-4) for j in range(len(choices))]
    pair = scale_guess_set(choices[int(np.argmax(mus))], n_sel, n_ev)
    v, r = one_run_counts(s[:, ~sel], t[:, ~sel], (pair,), seed)
    rj, vj = int(r[0, 0]), int(v[0, 0])
    return FdpBound(
        claim_refuted=None if claim is None else fdp_rejects(n_ev, rj, vj, alpha, claim),
        gdp_epsilon=gdp_family_epsilon(n_ev, rj, vj, alpha, delta, tol=1e-5),
        max_gdp_epsilon=gdp_family_epsilon(n_ev, rj, rj, alpha, delta, tol=1e-3),
        alpha=alpha, delta=delta, m=n_ev, k_plus=pair[0], k_minus=pair[1], guesses=rj, correct=vj,
        epsilon=largest_rejected_epsilon(n_ev, rj, vj, alpha, delta))
