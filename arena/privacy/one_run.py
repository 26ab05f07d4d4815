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
Clopper–Pearson lower bound on the accuracy, ``arena.privacy.binomial.cp_lower``) and ε_lb = logit(p_lo). With
δ > 0 the bound is found by bisection (any ε whose p-value is at most α is a valid bound, see
``one_run_epsilon_from_counts``).

**Guess set.** By default it is chosen on a seeded half of the canaries drawn independently of their bits (the
best of ``guess_grid``: 0.1 % to 50 % of them, one- and two-sided) and the bound is counted on the other half at
the full α: no Bonferroni factor, and the 2mδ term is half the whole's (with 65,536 canaries at δ = 1e-5 it is 1.31
on all of them, which is what held the old fixed grid at α/10 below 4.93 whatever the scores). With an explicit
grid the best of it on all the canaries is taken at α/|grid| (Bonferroni). Ties at the cut are broken by seeded
randomness independent of S (post-processing, allowed by the theorem). Applies to any experiment whose secret
bits are independent and uniform, for the relation a flip of one bit changes: add/remove for canaries inserted
or not, replace-one for a pair of which one trains (``paired_canaries``: score each pair by the difference of its
two scores).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import expit, gammaln, logit

from arena.privacy.binomial import ALPHA, cp_lower
from arena.privacy.heldout import as_batch

Grid = Sequence[tuple[int, int]]
"""(k₊, k₋) pairs: how many of the highest-scored canaries are guessed "in", how many of the lowest "out"."""


def one_run_p_values(m: int, r: int, v: int, epsilons: ArrayLike, delta: float = 0.0) -> np.ndarray:
    """Steinke, Nasr & Jagielski 2023: an upper bound on Pr[≥ v of r guesses correct] for an (ε, δ)-DP mechanism
    on m independent uniform canaries: β + 2mδ·max_{1≤i≤v}(Pr[B ≥ v − i] − β)/i with B ~ Binomial(r, e^ε/(1+e^ε))
    and β = Pr[B ≥ v] (the max term vanishes for δ = 0); at most 1. Vectorised over ``epsilons``."""
    _check_counts(m, r, v)
    eps = np.asarray(epsilons, np.float64)
    flat = eps.reshape(-1)
    return _p_values(m, np.full(flat.shape, r), np.full(flat.shape, v), flat, delta).reshape(eps.shape)


def _check_counts(m: int, r: int, v: int) -> None:
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")


_CELLS = 1 << 21
"""The most padded pmf entries ``_p_values`` holds at once (16 MiB a temporary)."""


def _p_values(m: int, r: np.ndarray, v: np.ndarray, eps: np.ndarray, delta: float) -> np.ndarray:
    """``one_run_p_values`` elementwise over 1-d arrays of (r, v, ε). The window sums Pr[v − i ≤ B < v] are
    cumulative sums of the pmf (one pass, no tail per i), on rows padded to the largest v."""
    from scipy.stats import binom  # here: importing scipy.stats costs 0.8 s, and registering plugins needs none

    b = binom.sf(v - 1, r, expit(eps))
    if delta == 0 or not v.any():
        return np.minimum(1.0, b)
    rows = max(1, _CELLS // int(v.max()))
    if v.size > rows:  # bounded memory: the padded rows of a chunk hold at most _CELLS numbers
        return np.concatenate([_p_values(m, r[c:c + rows], v[c:c + rows], eps[c:c + rows], delta)
                               for c in range(0, v.size, rows)])
    i = np.arange(1, int(v.max()) + 1)
    k = (v[:, None] - i).astype(np.float64)  # Pr[B = k] = exp(log C(r, k) + k·log p + (r − k)·log(1 − p)), k = v − i
    valid = k >= 0
    k = np.where(valid, k, 0.0)
    rr = r[:, None]
    log_choose = gammaln(rr + 1.0) - gammaln(k + 1.0) - gammaln(rr - k + 1.0)
    log_p, log_q = -np.logaddexp(0.0, -eps)[:, None], -np.logaddexp(0.0, eps)[:, None]  # log p, log(1 − p)
    pmf = np.where(valid, np.exp(log_choose + k * log_p + (rr - k) * log_q), 0.0)
    window = np.where(valid, np.cumsum(pmf, axis=-1) / i, -np.inf).max(axis=-1)
    return np.minimum(1.0, b + np.where(v > 0, 2 * m * delta * window, 0.0))  # v = 0: no window, β alone


def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float = 0.0) -> float:
    """``one_run_p_values`` at one ε."""
    return float(one_run_p_values(m, r, v, np.asarray(epsilon), delta))


def one_run_epsilon_from_counts(m: int, r: int, v: int, alpha: float = ALPHA, delta: float = 0.0,
                                tol: float = 1e-6) -> float:
    """A largest ε whose p-value is at most α: every (ε′, δ)-DP mechanism with ε′ ≤ ε is then rejected at level α
    ((ε′, δ)-DP implies (ε, δ)-DP, so the p-value of ε bounds it too), so no monotonicity of the p-value is needed.

    δ = 0: closed form logit(Beta⁻¹(α; v, r − v + 1)) (clipped at 0). δ > 0: bisection to ``tol`` between 0 and the
    δ = 0 bound (δ only weakens the evidence), keeping the end whose p-value is at most α."""
    _check_counts(m, r, v)
    return float(_epsilons_from_counts(m, np.array([r]), np.array([v]), alpha, delta, tol)[0])


def _epsilons_from_counts(m: int, r: np.ndarray, v: np.ndarray, alpha: float, delta: float, tol: float = 1e-6
                          ) -> np.ndarray:
    """``one_run_epsilon_from_counts`` elementwise over 1-d arrays of counts; the bisection runs on all of them at
    once, each element taking exactly the steps it would alone."""
    r, v = np.asarray(r, np.int64), np.asarray(v, np.int64)
    out = np.zeros(r.shape)
    live = np.flatnonzero((r > 0) & (v > 0))
    q = cp_lower(v[live], r[live], alpha)
    hi = np.zeros(live.size)
    hi[q > 0.5] = logit(q[q > 0.5])  # positive there; ε-DP says nothing where the accuracy's bound is ≤ ½
    if delta == 0:
        out[live] = hi
        return out
    keep = hi > 0
    live, hi = live[keep], hi[keep]
    keep = _p_values(m, r[live], v[live], np.zeros(live.size), delta) <= alpha
    live, hi = live[keep], hi[keep]
    at_hi = _p_values(m, r[live], v[live], hi, delta) <= alpha
    out[live[at_hi]] = hi[at_hi]
    live, hi = live[~at_hi], hi[~at_hi]
    lo = np.zeros(live.size)
    while (open_ := np.flatnonzero(hi - lo > tol)).size:
        mid = (lo[open_] + hi[open_]) / 2
        ok = _p_values(m, r[live[open_]], v[live[open_]], mid, delta) <= alpha
        lo[open_[ok]], hi[open_[~ok]] = mid[ok], mid[~ok]
    out[live] = lo
    return out


DEFAULT_GUESS_FRACTIONS = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 0.5)
"""Guess-set sizes as fractions of the canaries: 0.1 % and 0.3 % reach the few most telling scores of a tight
mechanism at large ε (with 65,536 canaries the old smallest, 1 %, left ε ≥ 5 unreachable)."""


def guess_grid(m: int, fractions: Sequence[float] = DEFAULT_GUESS_FRACTIONS) -> tuple[tuple[int, int], ...]:
    """The default (k₊, k₋) grid for m canaries: for each fraction f, k = max(1, round(f·m)) guessed "in" alone,
    and k "in" plus k "out" (when 2k ≤ m). Fixed before the scores are seen; its size is the Bonferroni factor
    (14 for m ≥ 1000)."""
    grid: list[tuple[int, int]] = []
    for f in fractions:
        k = max(1, round(f * m))
        for pair in ((k, 0), (k, k)):
            if sum(pair) <= m and pair not in grid:
                grid.append(pair)
    return tuple(grid)


def one_run_counts(scores: np.ndarray, truth: np.ndarray, grid: Grid, seed: int, shared_ties: bool = False
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Correct guesses v and guesses r, each (R, |grid|): top k₊ guessed in, bottom k₋ guessed out, ties broken
    by seeded randomness independent of the truths (``shared_ties``: every row by the draws a row alone gets, so
    that row i counts as a call on it alone would)."""
    R, m = scores.shape
    u = np.broadcast_to(np.random.default_rng(seed).random((1 if shared_ties else R, m)), (R, m))
    order = np.argsort(-scores, axis=-1)
    ranked = np.take_along_axis(scores, order, axis=-1)
    if np.any(ranked[:, 1:] == ranked[:, :-1]):  # without ties the descending order is unique: no tie-break needed
        order = np.lexsort((u, -scores), axis=-1)  # descending score, random among ties
    y = np.take_along_axis(truth, order, axis=-1).astype(np.int64)
    top = np.concatenate([np.zeros((R, 1), np.int64), np.cumsum(y, axis=-1)], axis=-1)  # in-canaries among top c
    total = top[:, -1]
    v = np.stack([top[:, kp] + (km - (total - top[:, m - km])) for kp, km in grid], axis=-1)
    r = np.array([kp + km for kp, km in grid])[None, :].repeat(R, axis=0)
    return v, r


@dataclass(frozen=True)
class OneRunBound:
    """ε ≥ ``epsilon`` with confidence 1 − ``alpha`` from one run (Steinke et al. 2023) on the ``m`` canaries it
    was counted on, at the guess set (k₊, k₋) that gave it: r guesses, v correct. ``selection``: how that guess
    set was chosen ("held-out half": on the other half of the canaries, so ``bonferroni`` = 1; "grid": the best
    of a fixed grid, paid for by ``bonferroni`` = |grid|). ``max_certifiable``: the most any outcome could certify
    (every guess right, at the guess set where that gives most): a claim above it cannot be refuted."""

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
    selection: str = "held-out half"
    bonferroni: int = 1
    method: str = "one run (Steinke, Nasr & Jagielski 2023)"


def selection_half(n: int, seed: int) -> np.ndarray:
    """A seeded mask of ⌊n/2⌋ of n canaries, drawn independently of their bits (so the other half's bits stay
    independent and uniform given everything the guesser uses: the one-run theorem holds on it alone)."""
    sel = np.zeros(n, bool)
    sel[np.random.default_rng([seed, 0x5E1]).permutation(n)[: n // 2]] = True
    return sel


def _bounds(m: int, r: np.ndarray, v: np.ndarray, a: float, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """Each guess set's bound, (R, |grid|) from counts (R, |grid|) (δ = 0: closed form; δ > 0: only what the
    search needs, the others 0), and each row's best index. The δ = 0 bound is an upper bound on the (ε, δ) one, so
    a row tries its guess sets in decreasing order of it and stops once none can beat its best; the rows search
    together, round by round."""
    q = cp_lower(v, r, a)
    with np.errstate(divide="ignore"):
        pure = np.where(q > 0.5, logit(np.clip(q, 1e-300, 1 - 1e-16)), 0.0)
    best = np.argmax(pure, axis=-1)
    if delta == 0:
        return pure, best
    out, rows = np.zeros_like(pure), np.arange(pure.shape[0])
    searching = np.ones(pure.shape[0], bool)
    for j in np.argsort(-pure, axis=-1, kind="stable").T:  # each row's next guess set, best first
        searching &= pure[rows, j] > out[rows, best]
        if not searching.any():
            break
        at, jj = rows[searching], j[searching]
        out[at, jj] = _epsilons_from_counts(m, r[at, jj], v[at, jj], a, delta)
        better = out[at, jj] > out[at, best[at]]
        best[at[better]] = jj[better]
    return out, best


def scale_guess_set(pair: tuple[int, int], n_from: int, n_to: int) -> tuple[int, int]:
    """A guess set chosen on n_from canaries as the same fractions of n_to, never more guesses than n_to (rounding
    up both halves of an all-canaries set of 74 gives 76 of 75)."""
    kp, km = (max(1, round(k * n_to / n_from)) if k else 0 for k in pair)
    kp = min(kp, n_to)
    return kp, min(km, n_to - kp)


def one_run_epsilon_batch(scores: ArrayLike, truth: ArrayLike, alpha: float = ALPHA, delta: float = 0.0,
                          grid: Grid | None = None, seed: int = 0) -> np.ndarray:
    """``one_run_epsilon(...).epsilon`` for R experiments at once (scores (R, m), truth (m,) or (R, m)), computed
    together: row i's value is that of ``one_run_epsilon`` on row i alone."""
    scores, truth = as_batch(scores, truth, same_counts=False)
    return _one_run(scores, truth, alpha, delta, grid, seed)[0]


def one_run_epsilon(scores: ArrayLike, truth: ArrayLike, alpha: float = ALPHA, delta: float = 0.0,
                    grid: Grid | None = None, seed: int = 0) -> OneRunBound:
    """The one-run bound of Steinke, Nasr & Jagielski 2023 from the scores of canaries each included with
    probability ½ (``truth``: 1 = included). Without ``grid``: the guess set is the best of ``guess_grid`` on a
    seeded half of the canaries (``selection_half``), and the bound is counted on the other half at level α
    (m = that half: its 2mδ term is half the whole's). With ``grid``: the best of those fixed guess sets on all
    the canaries, each at α/|grid| (Bonferroni)."""
    scores, truth = as_batch(scores, truth, same_counts=False)
    eps, pairs, r, v, m, sets, a = _one_run(scores[:1], truth[:1], alpha, delta, grid, seed)
    held_out = grid is None
    return OneRunBound(
        epsilon=float(eps[0]), alpha=alpha, delta=delta, m=m, k_plus=pairs[0][0], k_minus=pairs[0][1],
        guesses=int(r[0]), correct=int(v[0]), grid_size=len(sets),
        max_certifiable=one_run_max_certifiable(m, sets, a, delta),
        selection="held-out half" if held_out else "grid", bonferroni=1 if held_out else len(sets))


def _one_run(scores: np.ndarray, truth: np.ndarray, alpha: float, delta: float, grid: Grid | None, seed: int
             ) -> tuple[np.ndarray, list[tuple[int, int]], np.ndarray, np.ndarray, int, list[tuple[int, int]], float]:
    """``one_run_epsilon`` on every row of (R, n) scores: each row's ε, guess set, guesses and correct guesses; the
    m they were counted on, the guess sets a bound could have come from there (for the most certifiable) and the
    level each was tested at."""
    n, rows = scores.shape[1], np.arange(scores.shape[0])
    if grid is not None:
        sets = list(grid)
        if not sets or any(kp < 0 or km < 0 or kp + km > n or kp + km == 0 for kp, km in sets):
            raise ValueError(f"each guess set needs k+ >= 0, k- >= 0 and 0 < k+ + k- <= m = {n}")
        a = alpha / len(sets)
        v, r = one_run_counts(scores, truth, sets, seed, shared_ties=True)
        eps, j = _bounds(n, r, v, a, delta)
        return eps[rows, j], [sets[i] for i in j], r[rows, j], v[rows, j], n, sets, a
    if n < 4:
        raise ValueError(f"a held-out one-run bound needs at least 4 canaries, got {n}")
    sel = selection_half(n, seed)
    n_sel, n_ev = int(sel.sum()), int((~sel).sum())
    choices = guess_grid(n_sel)
    v, r = one_run_counts(scores[:, sel], truth[:, sel], choices, seed, shared_ties=True)
    _, j = _bounds(n_sel, r, v, alpha, delta)
    sets = [scale_guess_set(c, n_sel, n_ev) for c in choices]
    v, r = one_run_counts(scores[:, ~sel], truth[:, ~sel], sets, seed, shared_ties=True)
    r, v = r[rows, j], v[rows, j]
    eps, _ = _bounds(n_ev, r[:, None], v[:, None], alpha, delta)
    return eps[:, 0], [sets[i] for i in j], r, v, n_ev, sets, alpha


def one_run_max_certifiable(m: int, grid: Grid, alpha: float, delta: float = 0.0) -> float:
    """The largest one-run bound m canaries can give at level α (α already corrected for the grid, if it is
    searched): every guess right, at the guess set where that gives most. A function of the design alone, so
    computed once per (m, guess sets, α, δ): every seed of a matchup asks for the same."""
    return _max_certifiable(int(m), tuple(sorted({int(kp) + int(km) for kp, km in grid})), float(alpha),
                            float(delta))


@functools.lru_cache(maxsize=256)
def _max_certifiable(m: int, guesses: tuple[int, ...], alpha: float, delta: float) -> float:
    r = np.array(guesses)[None, :]
    eps, j = _bounds(m, r, r, alpha, delta)
    return float(eps[0, j[0]])


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
