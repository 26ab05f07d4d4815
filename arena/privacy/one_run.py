"""The one-run lower bound on ε (Steinke, Nasr & Jagielski 2023): *proved* from a single training run whose canaries
are each included independently with probability ½, where the held-out count needs independent runs.

**One-run bound** (``one_run_epsilon``; "Privacy Auditing with One (1) Training Run", NeurIPS 2023, Theorem 3.1 for
ε-DP and its (ε, δ) extension, their Algorithm for the p-value). m canaries are each included independently with
probability ½ (S_i uniform on {in, out}); from the one output the auditor guesses "in" for its k₊ highest-scored
canaries and "out" for its k₋ lowest, abstaining on the rest: r = k₊ + k₋ guesses, v correct. For an ε-DP
mechanism (w.r.t. flipping one S_i), the number correct is stochastically dominated by Binomial(r, p),
p = e^ε/(1 + e^ε), so the p-value of ε is

    β(ε) = Pr[Binomial(r, p) ≥ v]                                       (ε-DP)
    β(ε) + 2·m·δ · max_{1≤i≤v} (Pr[Binomial(r, p) ≥ v − i] − β(ε))/i        ((ε, δ)-DP)

and ε_lb = inf{ε ≥ 0 : p-value(ε) > α'}: every ε below it is rejected at level α'. For δ = 0 this has a closed
form: Pr[Binomial(r, p) ≥ v] = I_p(v, r − v + 1), so p_lo = Beta⁻¹(α'; v, r − v + 1) (the one-sided
Clopper–Pearson lower bound on the accuracy, ``arena.privacy.binomial.cp_lower``) and ε_lb = logit(p_lo). The
guesses (k₊, k₋) are searched over a small grid fixed in advance; the search is paid for with a Bonferroni
correction α' = α/|grid|. Ties at the cut are broken by seeded randomness independent of S (post-processing,
allowed by the theorem). Applies to any experiment whose secret bits are independent and uniform, for the relation
a flip of one bit changes: add/remove for canaries inserted or not, replace-one for a pair of which one trains
(``paired_canaries``: score each pair by the difference of its two scores).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import brentq
from scipy.special import expit, logit
from scipy.stats import binom

from arena.privacy.binomial import ALPHA, cp_lower
from arena.privacy.heldout import as_batch

Grid = Sequence[tuple[int, int]]
"""(k₊, k₋) pairs: how many of the highest-scored canaries are guessed "in", how many of the lowest "out"."""


def one_run_p_values(m: int, r: int, v: int, epsilons: ArrayLike, delta: float = 0.0) -> np.ndarray:
    """Steinke, Nasr & Jagielski 2023: an upper bound on Pr[≥ v of r guesses correct] for an (ε, δ)-DP mechanism
    on m independent uniform canaries: β + 2mδ·max_{1≤i≤v}(Pr[B ≥ v − i] − β)/i with B ~ Binomial(r, e^ε/(1+e^ε))
    and β = Pr[B ≥ v] (the max term vanishes for δ = 0); at most 1. Vectorised over ``epsilons``."""
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    p = expit(np.asarray(epsilons, np.float64))[..., None]
    tail = binom.sf(np.arange(v, -1, -1) - 1, r, p)  # Pr[B ≥ v − i] for i = 0..v, along the last axis
    b = tail[..., 0]
    if delta == 0 or v == 0:
        return np.minimum(1.0, b)
    i = np.arange(1, v + 1)
    return np.minimum(1.0, b + 2 * m * delta * np.max((tail[..., 1:] - b[..., None]) / i, axis=-1))


def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float = 0.0) -> float:
    """``one_run_p_values`` at one ε."""
    return float(one_run_p_values(m, r, v, np.asarray(epsilon), delta))


def one_run_epsilon_from_counts(m: int, r: int, v: int, alpha: float = ALPHA, delta: float = 0.0) -> float:
    """ε_lb = inf{ε ≥ 0: one_run_p_value(m, r, v, ε, δ) > α}: every smaller ε is rejected at level α.

    δ = 0: closed form logit(Beta⁻¹(α; v, r − v + 1)) (clipped at 0). δ > 0: the p-values on a grid of step
    0.01 up to the δ = 0 bound (δ only weakens the evidence) locate the first ε whose p-value exceeds α, then
    bisection in that bracket (the p-value is increasing in ε in practice; the grid keeps the answer at the
    first crossing even if it were not)."""
    if r == 0 or v == 0:
        return 0.0
    if delta == 0:
        q = float(cp_lower(v, r, alpha))
        return max(0.0, float(logit(q))) if q > 0.5 else 0.0
    upper = one_run_epsilon_from_counts(m, r, v, alpha, 0.0)
    if upper == 0.0:
        return 0.0
    grid = np.append(np.arange(0.0, upper, 0.01), upper + 1e-9)
    above = np.flatnonzero(one_run_p_values(m, r, v, grid, delta) > alpha)
    if len(above) == 0:  # not reached: the δ = 0 bound is where β alone exceeds α
        return upper
    j = int(above[0])
    if j == 0:
        return 0.0

    def f(e: float) -> float:
        return one_run_p_value(m, r, v, e, delta) - alpha

    return float(brentq(f, float(grid[j - 1]), float(grid[j]), xtol=1e-6)) if f(float(grid[j])) > 0 else 0.0


DEFAULT_GUESS_FRACTIONS = (0.01, 0.03, 0.1, 0.3, 0.5)


def guess_grid(m: int, fractions: Sequence[float] = DEFAULT_GUESS_FRACTIONS) -> tuple[tuple[int, int], ...]:
    """The default (k₊, k₋) grid for m canaries: for each fraction f, k = max(1, round(f·m)) guessed "in" alone,
    and k "in" plus k "out" (when 2k ≤ m). Fixed before the scores are seen; its size is the Bonferroni factor."""
    grid: list[tuple[int, int]] = []
    for f in fractions:
        k = max(1, round(f * m))
        for pair in ((k, 0), (k, k)):
            if sum(pair) <= m and pair not in grid:
                grid.append(pair)
    return tuple(grid)


def one_run_counts(scores: np.ndarray, truth: np.ndarray, grid: Grid, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Correct guesses v and guesses r, each (R, |grid|): top k₊ guessed in, bottom k₋ guessed out, ties broken
    by seeded randomness independent of the truths."""
    R, m = scores.shape
    u = np.random.default_rng(seed).random((R, m))
    order = np.lexsort((u, -scores), axis=-1)  # descending score, random among ties
    y = np.take_along_axis(truth, order, axis=-1).astype(np.int64)
    top = np.concatenate([np.zeros((R, 1), np.int64), np.cumsum(y, axis=-1)], axis=-1)  # in-canaries among top c
    total = top[:, -1]
    v = np.stack([top[:, kp] + (km - (total - top[:, m - km])) for kp, km in grid], axis=-1)
    r = np.array([kp + km for kp, km in grid])[None, :].repeat(R, axis=0)
    return v, r


@dataclass(frozen=True)
class OneRunBound:
    """ε ≥ ``epsilon`` with confidence 1 − ``alpha`` from one run on m canaries (Steinke et al. 2023), at the
    grid point (k₊, k₋) that gave it: r guesses, v correct. ``max_certifiable``: the bound if every guess of the
    best grid point were right."""

    epsilon: float
    alpha: float
    delta: float
    m: int
    k_plus: int
    k_minus: int
    guesses: int
    correct: int
    grid_size: int
    max_certifiable: float
    method: str = "one run (Steinke, Nasr & Jagielski 2023)"


def one_run_epsilon_batch(scores: ArrayLike, truth: ArrayLike, alpha: float = ALPHA, delta: float = 0.0,
                          grid: Grid | None = None, seed: int = 0) -> np.ndarray:
    """One-run ε_lb for R experiments at once (scores (R, m), truth (m,) or (R, m)); δ = 0 is fully vectorised."""
    scores, truth = as_batch(scores, truth, same_counts=False)
    m = scores.shape[1]
    grid = tuple(grid) if grid is not None else guess_grid(m)
    v, r = one_run_counts(scores, truth, grid, seed)
    a = alpha / len(grid)
    q = cp_lower(v, r, a)
    with np.errstate(divide="ignore"):
        pure = np.where(q > 0.5, logit(np.clip(q, 1e-300, 1 - 1e-16)), 0.0)  # the δ = 0 bounds, (R, |grid|)
    if delta == 0:
        return pure.max(axis=-1)
    return np.array([_best_with_delta(m, r[i], v[i], pure[i], a, delta)[0] for i in range(scores.shape[0])])


def _best_with_delta(m: int, r: np.ndarray, v: np.ndarray, pure: np.ndarray, a: float, delta: float
                     ) -> tuple[float, int]:
    """The largest (ε, δ) one-run bound over the grid and its index. The δ = 0 bound is an upper bound on it, so
    grid points are tried in decreasing order of that and the search stops once none can beat the best."""
    best, best_j = 0.0, int(np.argmax(pure))
    for j in np.argsort(-pure, kind="stable"):
        if pure[j] <= best:
            break
        e = one_run_epsilon_from_counts(m, int(r[j]), int(v[j]), a, delta)
        if e > best:
            best, best_j = e, int(j)
    return best, best_j


def one_run_epsilon(scores: ArrayLike, truth: ArrayLike, alpha: float = ALPHA, delta: float = 0.0,
                    grid: Grid | None = None, seed: int = 0) -> OneRunBound:
    """The one-run bound of Steinke, Nasr & Jagielski 2023 from the scores of m canaries each included with
    probability ½ (``truth``: 1 = included), maximised over the guess grid with a Bonferroni correction."""
    scores, truth = as_batch(scores, truth, same_counts=False)
    m = scores.shape[1]
    grid = tuple(grid) if grid is not None else guess_grid(m)
    if not grid or any(kp < 0 or km < 0 or kp + km > m or kp + km == 0 for kp, km in grid):
        raise ValueError(f"each guess set needs k+ >= 0, k- >= 0 and 0 < k+ + k- <= m = {m}")
    v, r = one_run_counts(scores, truth, grid, seed)
    a = alpha / len(grid)
    pure = np.array([one_run_epsilon_from_counts(m, int(r[0, j]), int(v[0, j]), a, 0.0) for j in range(len(grid))])
    if delta == 0:
        eps, j = float(pure.max()), int(np.argmax(pure))
    else:
        eps, j = _best_with_delta(m, r[0], v[0], pure, a, delta)
    return OneRunBound(
        epsilon=eps, alpha=alpha, delta=delta, m=m, k_plus=grid[j][0], k_minus=grid[j][1],
        guesses=int(r[0, j]), correct=int(v[0, j]), grid_size=len(grid),
        max_certifiable=one_run_epsilon_from_counts(m, int(r[0, j]), int(r[0, j]), a, delta),
    )


def paired_canaries(scores: ArrayLike, truth: ArrayLike, pair: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """A replace-one experiment as one-run canaries: for points grouped in pairs of which exactly one is a member
    (``pair``: the pair id of each point), canary i's score is score(first) − score(second) and its truth
    "the first is the member". Flipping a canary swaps one record for another: test against replace-one ε."""
    scores = np.asarray(scores, np.float64).reshape(-1)
    truth = np.asarray(truth).astype(bool).reshape(-1)
    pair = np.asarray(pair).reshape(-1)
    order = np.lexsort((np.arange(len(pair)), pair))
    ids, counts = np.unique(pair, return_counts=True)
    if not np.all(counts == 2):
        raise ValueError("every pair id must occur exactly twice")
    first, second = order[0::2], order[1::2]
    if not np.all(truth[first] ^ truth[second]):
        raise ValueError("each pair needs exactly one member")
    return scores[first] - scores[second], truth[first]
