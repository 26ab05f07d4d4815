"""Auditing DP claims: ε for the neighbouring relation played, and lower bounds on ε with a stated confidence.

Game-agnostic: every function takes scores and binary truths (or counts) and returns numbers; nothing here knows
which game produced them. Each estimator states its formula, its confidence and its source.

**ε of a claim under the relation the experiment plays** (``epsilon_for``, ``replace_one_claim``). A game in
which exactly one record of a member/non-member pair trains compares two datasets that differ by a *swap*
(replace-one), not by adding or removing a record; the claim to test is the replace-one ε. For DP-SGD it comes
from dp_accounting's PLD accountant with ``NeighboringRelation.REPLACE_ONE``; for a bare (ε, δ) claim under
add/remove, group privacy over remove-then-add gives (2ε, (1 + e^ε)·δ) under replace-one.

**Clopper–Pearson bound with held-out threshold selection** (``heldout_epsilon``; Jagielski, Ullman & Oprea
2020, "Auditing Differentially Private Machine Learning: How Private is Private SGD?", and Nasr et al. 2021,
"Adversary Instantiation"; the held-out split as in jax_privacy's auditing module). An (ε, δ)-DP mechanism
bounds every test between the two worlds: TPR ≤ e^ε·FPR + δ and TNR ≤ e^ε·FNR + δ. The scores are split (seeded,
per class) into a selection half and an evaluation half; the test (threshold and side) is chosen on the
selection half, then, on the evaluation half alone, with one-sided Clopper–Pearson bounds at level α/2 each
(Bonferroni), TPR_lo and FPR_hi, hold together with probability ≥ 1 − α, so

    ε ≥ ε_lb = max(0, log((TPR_lo − δ)/FPR_hi), log((1 − FPR_hi − δ)/(1 − TPR_lo)))

with confidence 1 − α. It is valid because the test is fixed before the evaluation half is looked at; taking the
best threshold on the same data (the old audit) is not. It treats the evaluation points as independent trials,
which holds exactly when each point comes from its own run of the mechanism (K models, canaries); for many points
scored on one model it is the conventional estimate, and the one-run bound below is the one that is proved.
``max_certifiable`` is the largest ε_lb a sample of that size can ever give (perfect separation).

**One-run bound** (``one_run_epsilon``; Steinke, Nasr & Jagielski 2023, "Privacy Auditing with One (1) Training
Run", NeurIPS 2023, Theorem 3.1 for ε-DP and its (ε, δ) extension, their Algorithm for the p-value). m canaries
are each included independently with probability ½ (S_i uniform on {in, out}); from the one output the auditor
guesses "in" for its k₊ highest-scored canaries and "out" for its k₋ lowest, abstaining on the rest: r = k₊ + k₋
guesses, v correct. For an ε-DP mechanism (w.r.t. flipping one S_i), the number correct is stochastically
dominated by Binomial(r, p), p = e^ε/(1 + e^ε), so the p-value of ε is

    β(ε) = Pr[Binomial(r, p) ≥ v]                                       (ε-DP)
    β(ε) + 2·m·δ · max_{1≤i≤v} (Pr[Binomial(r, p) ≥ v − i] − β(ε))/i        ((ε, δ)-DP)

and ε_lb = inf{ε ≥ 0 : p-value(ε) > α'}: every ε below it is rejected at level α'. For δ = 0 this has a closed
form: Pr[Binomial(r, p) ≥ v] = I_p(v, r − v + 1), so p_lo = Beta⁻¹(α'; v, r − v + 1) (the one-sided
Clopper–Pearson lower bound on the accuracy) and ε_lb = logit(p_lo). The guesses (k₊, k₋) are searched over a
small grid fixed in advance; the search is paid for with a Bonferroni correction α' = α/|grid|. Ties at the cut
are broken by seeded randomness independent of S (post-processing, allowed by the theorem). Applies to any
experiment whose secret bits are independent and uniform, for the relation a flip of one bit changes: add/remove
for canaries inserted or not, replace-one for a pair of which one trains (score each pair by the difference of
its two scores).

**Gaussian-DP estimate** (``gdp_estimate``; Nasr, Hayes, Steinke, Balle, Tramèr, Jagielski, Carlini & Terzis
2023, "Tight Auditing of Differentially Private Machine Learning", USENIX Security 2023; Dong, Roth & Su 2022,
"Gaussian Differential Privacy", Eq. 6 and Corollary 2.13). If the mechanism is μ-GDP, every test has
FNR ≥ Φ(Φ⁻¹(1 − FPR) − μ), hence with confidence 1 − α (held-out threshold, one-sided Clopper–Pearson at α/2 on
FPR and FNR)

    μ ≥ μ_lo = Φ⁻¹(1 − FPR_hi) − Φ⁻¹(FNR_hi),

converted to ε at δ by solving δ = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2). It is an *estimate*: it assumes the
mechanism's trade-off curve is Gaussian (true of DP-SGD's white-box worst case), so it is never the basis of a
verdict here.

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
gives the figures), which is conservative, but that part is measured, not proved. It uses every score, not the two counts at one threshold, so it
resolves μ to ±z·se (about ±0.01 with 65,536 canaries) where a Clopper–Pearson count at a tail threshold would need
millions. With Poisson subsampling (q < 1) the movement is a Gaussian mixture, the hypothesis fails and the figure
is an estimate only.

**Verdicts** belong to the games (``arena.games.<game>.audit``): flagged iff a lower bound at level α exceeds the
claim's ε for the relation the experiment plays (the Gaussian-fit bound only where its hypothesis holds, the
one-threshold Gaussian-DP estimate never); under a true claim the flag fires with probability at most α
(simulated in the tests).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.optimize import brentq
from scipy.special import expit, logit
from scipy.stats import beta, binom, norm

from arena.privacy.accounting import Accountant, Relation, epsilon_under

ALPHA = 0.05  # default level of every bound and verdict: 95% confidence

Direction = Literal["higher", "lower", ""]


# ------------------------------------------------------------------------------------------------ ε of a claim


@functools.lru_cache(maxsize=256)  # a PLD call takes about a second; an audit asks the same claim many times
def epsilon_for(
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    delta: float,
    relation: Relation = "add_remove",
    accountant: Accountant = "pld",
) -> float:
    """ε at δ of DP-SGD (``steps`` Poisson-subsampled Gaussian steps, noise std/clip = ``noise_multiplier``)
    under ``relation`` ("add_remove" or "replace_one"), by dp_accounting's ``accountant`` ("pld" or "rdp"; RDP
    cannot account replace-one with subsampling and raises ValueError)."""
    return epsilon_under(noise_multiplier, sample_rate, steps, delta, accountant=accountant, relation=relation)


def group_replace_one(epsilon: float, delta: float) -> tuple[float, float]:
    """(ε, δ) under add/remove ⇒ (2ε, (1 + e^ε)·δ) under replace-one (group privacy: remove x, then add x').

    P[M(D) ∈ S] ≤ e^ε·P[M(D∖x) ∈ S] + δ ≤ e^ε·(e^ε·P[M(D∖x ∪ x') ∈ S] + δ) + δ. For pure ε-DP: 2ε."""
    return 2.0 * epsilon, (1.0 + math.exp(min(epsilon, 700.0))) * delta if delta else 0.0


@dataclass(frozen=True)
class RelationClaim:
    """A claim restated for the relation an experiment plays: the (ε, δ) to test and how it was obtained."""

    epsilon: float
    delta: float
    relation: Relation
    how: str


def replace_one_claim(claim: dict) -> RelationClaim:
    """The replace-one (ε, δ) of a recorded claim (a dict with epsilon, delta and, for DP-SGD, noise_multiplier,
    sample_rate, steps). DP-SGD: the PLD accountant under replace-one at the claimed δ. Otherwise (a bare add/remove
    claim, e.g. output perturbation's pure ε-DP): group privacy, (2ε, (1 + e^ε)·δ)."""
    eps, delta = float(claim["epsilon"]), float(claim["delta"])
    sigma, q, steps = claim.get("noise_multiplier"), claim.get("sample_rate"), claim.get("steps")
    if sigma is not None and q is not None and steps is not None and 0 < delta < 1:
        r = epsilon_for(float(sigma), float(q), int(steps), delta, relation="replace_one", accountant="pld")
        return RelationClaim(r, delta, "replace_one", f"dp_accounting PLD, replace-one (σ = {float(sigma):.4g}, "
                                                      f"q = {float(q):.4g}, {int(steps)} steps)")
    r_eps, r_delta = group_replace_one(eps, delta)
    return RelationClaim(r_eps, r_delta, "replace_one", "group privacy: (2ε, (1 + e^ε)δ)")


# ------------------------------------------------------------------------------------- Clopper–Pearson pieces


def cp_lower(k: np.ndarray | int, n: int, alpha: float) -> np.ndarray:
    """One-sided (1 − α) Clopper–Pearson lower bound on a binomial proportion from k successes of n:
    Beta⁻¹(α; k, n − k + 1), and 0 at k = 0. Vectorised over k."""
    k = np.asarray(k, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(k > 0, beta.ppf(alpha, np.maximum(k, 1), n - k + 1), 0.0)


def cp_upper(k: np.ndarray | int, n: int, alpha: float) -> np.ndarray:
    """One-sided (1 − α) Clopper–Pearson upper bound: Beta⁻¹(1 − α; k + 1, n − k), and 1 at k = n."""
    k = np.asarray(k, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(k < n, beta.ppf(1 - alpha, k + 1, np.maximum(n - k, 1)), 1.0)


def epsilon_from_rates(tpr_lo: np.ndarray, fpr_hi: np.ndarray, delta: float) -> np.ndarray:
    """max(0, log((TPR_lo − δ)/FPR_hi), log((1 − FPR_hi − δ)/(1 − TPR_lo))); a term whose numerator is not
    positive says nothing. Vectorised."""
    tpr_lo, fpr_hi = np.broadcast_arrays(np.asarray(tpr_lo, np.float64), np.asarray(fpr_hi, np.float64))
    out = np.zeros(tpr_lo.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        fwd = np.where(tpr_lo - delta > 0, np.log(np.maximum(tpr_lo - delta, 1e-300) / fpr_hi), 0.0)
        bwd = np.where(1 - fpr_hi - delta > 0,
                       np.log(np.maximum(1 - fpr_hi - delta, 1e-300) / (1 - tpr_lo)), 0.0)
    return np.maximum(out, np.maximum(fwd, bwd))


def epsilon_from_counts(tp, n_pos: int, fp, n_neg: int, delta: float, alpha: float = ALPHA) -> np.ndarray:
    """ε_lb at confidence 1 − α from tp of n_pos positives and fp of n_neg negatives flagged by one *fixed* test:
    TPR_lo = cp_lower(tp, n_pos, α/2), FPR_hi = cp_upper(fp, n_neg, α/2) (Bonferroni), then
    ``epsilon_from_rates``."""
    _check(n_pos, n_neg, alpha, delta)
    return epsilon_from_rates(cp_lower(tp, n_pos, alpha / 2), cp_upper(fp, n_neg, alpha / 2), delta)


def max_certifiable(n_pos: int, n_neg: int, alpha: float = ALPHA, delta: float = 0.0) -> float:
    """The largest ε_lb ``epsilon_from_counts`` can ever give with n_pos positives and n_neg negatives: perfect
    separation, TPR_lo = (α/2)^(1/n_pos), FPR_hi = 1 − (α/2)^(1/n_neg). Below this no sample of that size can show
    anything; a claim above it cannot be refuted by such an audit."""
    return float(epsilon_from_counts(n_pos, n_pos, 0, n_neg, delta, alpha))


def _check(n_pos: int, n_neg: int, alpha: float, delta: float) -> None:
    if n_pos < 1 or n_neg < 1:
        raise ValueError(f"an ε lower bound needs positives and negatives, got {n_pos} and {n_neg}")
    if not 0 < alpha < 1 or not 0 <= delta < 1:
        raise ValueError(f"need 0 < alpha < 1 and 0 <= delta < 1, got {alpha} and {delta}")


# --------------------------------------------------------------------------- held-out threshold selection


def split_halves(truth: np.ndarray, seed: int) -> np.ndarray:
    """Selection mask: within each row and each class, a seeded random ⌊n_c/2⌋ of the points select the test,
    the other ⌈n_c/2⌉ evaluate it. ``truth`` is (n,) or (R, n); the mask has its shape."""
    truth = np.asarray(truth).astype(bool)
    rows = np.atleast_2d(truth)
    rng = np.random.default_rng(seed)
    sel = np.zeros(rows.shape, bool)
    if np.all(rows == rows[0]):  # one class layout for every row: shuffle each class's positions (no sort)
        R = rows.shape[0]
        for cls in (False, True):
            idx = np.flatnonzero(rows[0] == cls)
            chosen = rng.permuted(np.broadcast_to(idx, (R, len(idx))), axis=1)[:, : len(idx) // 2]
            np.put_along_axis(sel, chosen, True, axis=1)
    else:
        key = rng.random(rows.shape) + 2.0 * rows  # sorts class 0 first, each class in random order
        rank = np.argsort(np.argsort(key, axis=-1), axis=-1)
        n0 = (~rows).sum(axis=-1, keepdims=True)
        n1 = rows.sum(axis=-1, keepdims=True)
        sel = np.where(rows, rank - n0, rank) < np.where(rows, n1 // 2, n0 // 2)
    return sel.reshape(truth.shape)


def _cuts(scores: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row, the tests "score ≥ t" at every realisable cut of the descending order: (tp, fp, valid, t), each
    (R, n + 1); cut c flags the c highest scores (t halfway between the c-th and (c+1)-th highest, +inf for
    c = 0, −inf for c = n); a cut inside a run of tied scores cannot be realised by a threshold and is not valid."""
    order = np.argsort(-scores, axis=-1, kind="stable")
    s = np.take_along_axis(scores, order, axis=-1)
    y = np.take_along_axis(truth, order, axis=-1)
    R, n = s.shape
    zero = np.zeros((R, 1), np.int64)
    tp = np.concatenate([zero, np.cumsum(y, axis=-1)], axis=-1)
    fp = np.arange(n + 1)[None, :] - tp
    valid = np.ones((R, n + 1), bool)
    valid[:, 1:n] = s[:, :-1] > s[:, 1:]
    with np.errstate(invalid="ignore", over="ignore"):
        mid = s[:, :-1] / 2 + s[:, 1:] / 2  # halfway to the next score: a test that generalises to new points
    mid = np.where(np.isnan(mid), s[:, :-1], mid)
    t = np.concatenate([np.full((R, 1), np.inf), mid, np.full((R, 1), -np.inf)], axis=-1)
    return tp, fp, valid, t


def _select(scores: np.ndarray, truth: np.ndarray, sel: np.ndarray, objective) -> tuple[np.ndarray, np.ndarray]:
    """On the selection points of each row, the side (+1: higher means positive, −1: lower) and threshold that
    maximise ``objective(tp, n_pos, fp, n_neg)``. Returns (sign, t), each (R,)."""
    R = scores.shape[0]
    k = int(sel[0].sum())
    if not np.all(sel.sum(axis=-1) == k):
        raise ValueError("every row needs the same number of selection points")
    s = scores[sel].reshape(R, k)
    y = truth[sel].reshape(R, k)
    n_pos = int(y[0].sum())
    n_neg = k - n_pos
    best_val = np.full(R, -np.inf)
    best_sign = np.ones(R)
    best_t = np.full(R, np.inf)
    for sign in (1.0, -1.0):
        tp, fp, valid, t = _cuts(sign * s, y)
        val = np.where(valid, objective(tp, n_pos, fp, n_neg), -np.inf)
        j = np.argmax(val, axis=-1)
        v = val[np.arange(R), j]
        better = v > best_val
        best_val = np.where(better, v, best_val)
        best_sign = np.where(better, sign, best_sign)
        best_t = np.where(better, t[np.arange(R), j], best_t)
    return best_sign, best_t


def _evaluate(scores, truth, ev, sign, t) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Counts of the fixed tests (sign·score ≥ t) on the evaluation points: (tp, fp, n_pos, n_neg)."""
    flagged = (sign[:, None] * scores >= t[:, None]) & ev
    tp = (flagged & truth).sum(axis=-1)
    fp = (flagged & ~truth).sum(axis=-1)
    n_pos = int((ev & truth)[0].sum())
    n_neg = int((ev & ~truth)[0].sum())
    return tp, fp, n_pos, n_neg


def _as_batch(scores, truth, same_counts: bool = True) -> tuple[np.ndarray, np.ndarray]:
    scores = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    truth = np.broadcast_to(np.atleast_2d(np.asarray(truth).astype(bool)), scores.shape)
    if np.isnan(scores).any():
        raise ValueError("scores contain NaN")
    counts = truth.sum(axis=-1)
    if same_counts and not np.all(counts == counts[0]):
        raise ValueError("every row needs the same number of positives")
    return scores, np.ascontiguousarray(truth)


def _cp_objective(delta: float, alpha: float):
    """ε_lb as a function of counts, through lookup tables of the Clopper–Pearson ends (fast for many cuts)."""
    def objective(tp, n_pos, fp, n_neg):
        lo = cp_lower(np.arange(n_pos + 1), n_pos, alpha / 2)
        hi = cp_upper(np.arange(n_neg + 1), n_neg, alpha / 2)
        return epsilon_from_rates(lo[tp], hi[fp], delta)
    return objective


@dataclass(frozen=True)
class HeldOutBound:
    """ε ≥ ``epsilon`` with confidence 1 − ``alpha``, from a test chosen on the selection half and counted on the
    evaluation half (sizes ``n_pos`` + ``n_neg``; ``max_certifiable`` is the most those sizes can show)."""

    epsilon: float
    alpha: float
    delta: float
    direction: Direction  # "higher": a score ≥ threshold is called positive; "lower": a score ≤ −threshold
    threshold: float
    true_positives: int  # on the evaluation half
    false_positives: int
    n_pos: int  # evaluation half
    n_neg: int
    n_pos_total: int
    n_neg_total: int
    max_certifiable: float
    method: str = "Clopper–Pearson, held-out threshold"


def heldout_epsilon_batch(
    scores: np.ndarray, truth: np.ndarray, delta: float, alpha: float = ALPHA, seed: int = 0
) -> tuple[np.ndarray, dict]:
    """``heldout_epsilon`` for R experiments at once: scores (R, n), truth (n,) or (R, n) with the same class
    counts per row. Returns (ε_lb of shape (R,), details: sign, threshold, tp, fp, n_pos, n_neg)."""
    scores, truth = _as_batch(scores, truth)
    sel = split_halves(truth, seed)
    sign, t = _select(scores, truth, sel, _cp_objective(delta, alpha))
    tp, fp, n_pos, n_neg = _evaluate(scores, truth, ~sel, sign, t)
    _check(n_pos, n_neg, alpha, delta)
    eps = epsilon_from_counts(tp, n_pos, fp, n_neg, delta, alpha)
    return eps, {"sign": sign, "threshold": t, "tp": tp, "fp": fp, "n_pos": n_pos, "n_neg": n_neg}


def heldout_epsilon(
    scores: np.ndarray, truth: np.ndarray, delta: float, alpha: float = ALPHA, seed: int = 0
) -> HeldOutBound:
    """Clopper–Pearson ε lower bound with the threshold and side chosen on a seeded half of the points (per
    class) and the bound computed on the other half; see the module docstring. ``truth``: 1 for the points of
    the world "with" (members, canaries in), 0 for the other. Both halves need each class (≥ 2 of each)."""
    eps, d = heldout_epsilon_batch(scores, truth, delta, alpha, seed)
    truth = np.asarray(truth).astype(bool).reshape(-1)
    n_pos_total, n_neg_total = int(truth.sum()), int((~truth).sum())
    sign, t = float(d["sign"][0]), float(d["threshold"][0])
    e = float(eps[0])
    return HeldOutBound(
        epsilon=e, alpha=alpha, delta=delta,
        direction=("higher" if sign > 0 else "lower") if e > 0 else "",
        threshold=t, true_positives=int(d["tp"][0]), false_positives=int(d["fp"][0]),
        n_pos=d["n_pos"], n_neg=d["n_neg"], n_pos_total=n_pos_total, n_neg_total=n_neg_total,
        max_certifiable=max_certifiable(d["n_pos"], d["n_neg"], alpha, delta),
    )


# ------------------------------------------------------------------------------------------- one-run bound


def one_run_p_values(m: int, r: int, v: int, epsilons: np.ndarray, delta: float = 0.0) -> np.ndarray:
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
    f = lambda e: one_run_p_value(m, r, v, e, delta) - alpha  # noqa: E731
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


def _one_run_counts(scores: np.ndarray, truth: np.ndarray, grid, seed: int) -> tuple[np.ndarray, np.ndarray]:
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


def one_run_epsilon_batch(scores, truth, alpha: float = ALPHA, delta: float = 0.0,
                          grid: Sequence[tuple[int, int]] | None = None, seed: int = 0) -> np.ndarray:
    """One-run ε_lb for R experiments at once (scores (R, m), truth (m,) or (R, m)); δ = 0 is fully vectorised."""
    scores, truth = _as_batch(scores, truth, same_counts=False)
    m = scores.shape[1]
    grid = tuple(grid) if grid is not None else guess_grid(m)
    v, r = _one_run_counts(scores, truth, grid, seed)
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


def one_run_epsilon(scores, truth, alpha: float = ALPHA, delta: float = 0.0,
                    grid: Sequence[tuple[int, int]] | None = None, seed: int = 0) -> OneRunBound:
    """The one-run bound of Steinke, Nasr & Jagielski 2023 from the scores of m canaries each included with
    probability ½ (``truth``: 1 = included), maximised over the guess grid with a Bonferroni correction."""
    scores, truth = _as_batch(scores, truth, same_counts=False)
    m = scores.shape[1]
    grid = tuple(grid) if grid is not None else guess_grid(m)
    if not grid or any(kp < 0 or km < 0 or kp + km > m or kp + km == 0 for kp, km in grid):
        raise ValueError(f"each guess set needs k+ >= 0, k- >= 0 and 0 < k+ + k- <= m = {m}")
    v, r = _one_run_counts(scores, truth, grid, seed)
    a = alpha / len(grid)
    pure = np.array([one_run_epsilon_from_counts(m, int(r[0, j]), int(v[0, j]), a, 0.0) for j in range(len(grid))])
    eps, j = (float(pure.max()), int(np.argmax(pure))) if delta == 0 else _best_with_delta(m, r[0], v[0], pure, a, delta)
    return OneRunBound(
        epsilon=eps, alpha=alpha, delta=delta, m=m, k_plus=grid[j][0], k_minus=grid[j][1],
        guesses=int(r[0, j]), correct=int(v[0, j]), grid_size=len(grid),
        max_certifiable=one_run_epsilon_from_counts(m, int(r[0, j]), int(r[0, j]), a, delta),
    )


def paired_canaries(scores: np.ndarray, truth: np.ndarray, pair: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


# --------------------------------------------------------------------------------------- Gaussian DP estimate


def gdp_delta(mu: float, epsilon: float) -> float:
    """δ(ε) of μ-GDP (Dong, Roth & Su, Corollary 2.13): Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2), in log space."""
    if mu <= 0:
        return 0.0
    a = norm.logcdf(-epsilon / mu + mu / 2)
    b = epsilon + norm.logcdf(-epsilon / mu - mu / 2)
    return float(np.exp(a) * -np.expm1(b - a)) if b < a else 0.0


def gdp_epsilon(mu: float, delta: float) -> float:
    """The ε at which μ-GDP is (ε, δ)-DP: the root of gdp_delta(μ, ε) = δ (0 if δ(0) ≤ δ)."""
    if mu <= 0 or gdp_delta(mu, 0.0) <= delta:
        return 0.0
    hi = 1.0
    while gdp_delta(mu, hi) > delta:
        hi *= 2
    return float(brentq(lambda e: gdp_delta(mu, e) - delta, 0.0, hi, xtol=1e-10))


def gdp_mu(epsilon: float, delta: float) -> float:
    """The μ whose μ-GDP is exactly (ε, δ)-DP (inverse of ``gdp_epsilon`` in μ)."""
    hi = 1.0
    while gdp_epsilon(hi, delta) < epsilon:
        hi *= 2
    return float(brentq(lambda m: gdp_epsilon(m, delta) - epsilon, 1e-9, hi, xtol=1e-10))


def gdp_mu_lower(tp, n_pos: int, fp, n_neg: int, alpha: float = ALPHA) -> np.ndarray:
    """μ_lo = Φ⁻¹(1 − FPR_hi) − Φ⁻¹(FNR_hi), FPR_hi and FNR_hi = 1 − TPR_lo one-sided Clopper–Pearson at α/2
    (Nasr et al. 2023). Vectorised; may be negative (no evidence)."""
    fpr_hi = cp_upper(fp, n_neg, alpha / 2)
    fnr_hi = 1.0 - cp_lower(tp, n_pos, alpha / 2)
    return norm.isf(fpr_hi) - norm.ppf(fnr_hi)


@dataclass(frozen=True)
class GdpEstimate:
    """The Gaussian-DP estimate at confidence 1 − ``alpha`` *if the trade-off is Gaussian*: μ ≥ ``mu_lo``, hence
    ε(δ) ≥ ``epsilon``; threshold chosen on the selection half, counted on the evaluation half."""

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


def gdp_estimate(scores, truth, delta: float, alpha: float = ALPHA, seed: int = 0) -> GdpEstimate:
    """The Gaussian-DP estimate of Nasr et al. 2023 with the threshold (and side) chosen on a held-out half."""
    scores, truth = _as_batch(scores, truth)
    sel = split_halves(truth, seed)

    def objective(tp, n_pos, fp, n_neg):
        lo = cp_lower(np.arange(n_pos + 1), n_pos, alpha / 2)
        hi = cp_upper(np.arange(n_neg + 1), n_neg, alpha / 2)
        return norm.isf(hi[fp]) - norm.ppf(1.0 - lo[tp])

    sign, t = _select(scores, truth, sel, objective)
    tp, fp, n_pos, n_neg = _evaluate(scores, truth, ~sel, sign, t)
    _check(n_pos, n_neg, alpha, delta)
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


def gaussian_mu_batch(scores, truth) -> tuple[np.ndarray, np.ndarray]:
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


def gaussian_bound(scores, truth, delta: float, alpha: float = ALPHA) -> GaussianBound:
    """``GaussianBound`` of one experiment's scores (higher: included) and truths."""
    t = np.asarray(truth).astype(bool).reshape(-1)
    mu, se = gaussian_mu_batch(np.asarray(scores, dtype=np.float64).reshape(1, -1), t)
    lo = float(mu[0] - norm.isf(alpha) * se[0])
    eps = (math.inf if math.isinf(lo) else gdp_epsilon(lo, delta)) if lo > 0 else 0.0
    return GaussianBound(eps, float(mu[0]), lo, float(se[0]), alpha, delta, int(t.sum()), int((~t).sum()))


def gaussian_kind(sample_rate: float | None, kinds: Sequence[str]) -> str | None:
    """The kind whose Gaussian-fit bound joins the verdict: the white-box gradient canaries of a full-batch claim
    (``sample_rate`` 1), whose scores are then Gaussian (``arena.privacy.auditing``); None otherwise."""
    full_batch = sample_rate is not None and float(sample_rate) >= 1.0
    return "gradient" if full_batch and "gradient" in kinds else None


def gaussian_flags(scores, truth, claimed_epsilon: float, delta: float, alpha: float = ALPHA) -> np.ndarray:
    """[R] booleans: the Gaussian-fit bound at level α exceeds ``claimed_epsilon`` (μ_lo above the μ whose GDP is
    exactly (claimed ε, δ)-DP), for R experiments at once (the calibration tests simulate it)."""
    mu, se = gaussian_mu_batch(scores, truth)
    return mu - norm.isf(alpha) * se > gdp_mu(claimed_epsilon, delta)
