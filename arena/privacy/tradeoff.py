"""Trade-off curves of DP claims: which (FPR, TPR) an attack can reach against a mechanism that satisfies the claim,
with the privacy profile δ(ε) they are read from. Every curve here is a proved bound on what any attack can reach.

A membership or canary test between two neighbouring worlds has a false-positive rate α (calling "in" in the world
without the record) and a false-negative rate β. A mechanism is f-DP (Dong, Roth & Su 2022, "Gaussian Differential
Privacy", JRSS-B) when every test has β ≥ f(α): f is its *trade-off function*, and an attack's ROC curve must stay in
the region TPR ≤ 1 − f(FPR). This module computes f for the claim actually made, under the neighbouring relation the
experiment plays:

- **DP-SGD without subsampling** (q = 1): T Gaussian steps of noise σ·C on a sum of sensitivity C (add/remove) are
  μ-GDP with μ = √T/σ (``dpsgd_mu``), so f(α) = Φ(Φ⁻¹(1 − α) − μ) (``gaussian_tradeoff``; Dong et al., Corollary
  3.3). Under replace-one the sensitivity is 2C and μ doubles.
- **Poisson-subsampled DP-SGD** (q < 1): no closed form. The composed privacy-loss distribution of dp_accounting
  (``from_gaussian_mechanism(σ, sampling_prob=q, neighboring_relation=…).self_compose(T)``, pessimistic, connect
  the dots; ``pld_profile``) gives the privacy profile δ(ε) exactly up to its discretisation; f is its dual (Dong
  et al., Proposition 2.12): f(α) = sup_{ε ≥ 0} max(0, 1 − δ(ε) − e^ε·α, e^{−ε}·(1 − δ(ε) − α)), the supremum taken on a
  grid of ε (``tradeoff_from_profile``). A pessimistic δ(ε) and a finite grid can only lower f, so the region
  drawn is never smaller than the mechanism's.
- **A bare (ε, δ) claim** (``eps_delta_tradeoff``): f_{ε,δ}(α) = max(0, 1 − δ − e^ε·α, e^{−ε}·(1 − δ − α)), i.e.
  TPR ≤ min(e^ε·FPR + δ, 1 − e^{−ε}·(1 − δ − FPR)); its first line alone, min(1, e^ε·p + δ), is
  ``eps_delta_line`` (the membership game's TPR bound, Balle et al.'s reconstruction bound). Every DP-SGD claim is
  also drawn this way, for comparison: the (ε, δ) region is much looser than the mechanism's own curve at low FPR.

``claim_tradeoff(claim, relation)`` takes a recorded claim (a dict with ``epsilon``, ``delta`` and, for DP-SGD,
``noise_multiplier``, ``sample_rate``, ``steps``) and returns a ``ClaimTradeoff`` whose ``tpr_bound(fpr)`` is the
mechanism's curve (None when the claim records no mechanism) and ``eps_delta_tpr_bound(fpr)`` the (ε, δ) region's,
for the relation's ε (replace-one: ``arena.privacy.relations.replace_one_claim``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import ndtr, ndtri  # norm.cdf and norm.ppf; importing scipy.stats costs 0.8 s

from arena.privacy.accounting import RELATIONS, Relation, neighboring_relation
from arena.privacy.relations import replace_one_claim

# dp_accounting's privacy-loss discretisation for the curves (its accountant's default, as epsilon_under uses)
VALUE_DISCRETIZATION = 1e-4
EPSILON_GRID = 4000  # points of the ε grid on which the supremum over the privacy profile is taken
TINY_DELTA = 1e-14  # beyond the ε with this δ, no line of the profile raises f any further


def gaussian_tradeoff(alpha: np.ndarray | float, mu: float) -> np.ndarray:
    """The μ-GDP trade-off function G_μ(α) = Φ(Φ⁻¹(1 − α) − μ) (the least FNR at FPR α)."""
    alpha = np.clip(np.asarray(alpha, dtype=np.float64), 0.0, 1.0)
    if math.isinf(mu):
        return np.zeros_like(alpha)
    return ndtr(-ndtri(alpha) - mu)


def dpsgd_mu(noise_multiplier: float, steps: int, relation: Relation = "add_remove") -> float:
    """μ of full-batch DP-SGD: T Gaussian steps of noise σ·C compose to √T/σ-GDP under add/remove (sensitivity C),
    2√T/σ under replace-one (sensitivity 2C); ∞ without noise. Not the μ of an (ε, δ) pair: that is
    ``arena.privacy.gdp.gdp_mu``."""
    _check_relation(relation)
    if steps < 0 or noise_multiplier < 0:
        raise ValueError(f"need steps >= 0 and noise_multiplier >= 0, got {steps} and {noise_multiplier}")
    if steps == 0:
        return 0.0
    if noise_multiplier == 0:
        return math.inf
    return (2.0 if relation == "replace_one" else 1.0) * math.sqrt(steps) / noise_multiplier


def eps_delta_line(epsilon: float, delta: float, p: float) -> float:
    """min(1, e^ε·p + δ), without overflow for large ε (e^700·p > 1 for any positive double p): the first line of
    the (ε, δ) region, which bounds TPR at FPR p and a reconstruction's success at prior mass κ = p."""
    if p <= 0.0:
        return min(1.0, delta)
    return min(1.0, math.exp(min(epsilon, 700.0)) * p + delta)


def eps_delta_tradeoff(alpha: np.ndarray | float, epsilon: float, delta: float) -> np.ndarray:
    """f_{ε,δ}(α) = max(0, 1 − δ − e^ε·α, e^{−ε}·(1 − δ − α)): the trade-off function of (ε, δ)-DP."""
    alpha = np.clip(np.asarray(alpha, dtype=np.float64), 0.0, 1.0)
    if math.isinf(epsilon):
        return np.zeros_like(alpha)
    e = math.exp(min(epsilon, 700.0))
    with np.errstate(over="ignore"):
        return np.maximum(0.0, np.maximum(1.0 - delta - e * alpha, (1.0 - delta - alpha) / e))


def tradeoff_from_profile(alpha: np.ndarray | float, epsilons: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    """f(α) = sup over the profile's points (ε_i, δ_i) of f_{ε_i,δ_i}(α) (Dong, Roth & Su 2022, Prop. 2.12): the
    trade-off function of a mechanism that is (ε, δ(ε))-DP for every ε ≥ 0, read on a grid of ε."""
    alpha = np.clip(np.asarray(alpha, dtype=np.float64), 0.0, 1.0)
    eps = np.asarray(epsilons, dtype=np.float64)
    dl = np.asarray(deltas, dtype=np.float64)
    flat = alpha.reshape(-1)
    order = np.argsort(flat, kind="stable")
    out = np.zeros_like(flat)
    e = np.exp(np.minimum(eps, 700.0))

    def lines(a: np.ndarray, keep: slice | np.ndarray = slice(None)) -> np.ndarray:
        with np.errstate(over="ignore"):
            return np.maximum(1.0 - dl[keep] - e[keep] * a, (1.0 - dl[keep] - a) / e[keep])

    for start in range(0, flat.size, 256):  # blocks of 256 increasing α: memory bounded whatever the grid sizes
        idx = order[start : start + 256]
        a = flat[idx]
        # every line decreases in α, in floating point too (rounding is monotone): a line below, at the block's
        # smallest α, what the best line reaches at its largest is below the supremum everywhere in the block
        keep = np.flatnonzero(lines(a[:1]) >= lines(a[-1:]).max())
        out[idx] = np.maximum(lines(a[:, None], keep).max(axis=1), 0.0)
    return out.reshape(alpha.shape)


EpsilonGrid = tuple[float, float, int]
"""A fixed ε grid as ``np.linspace(start, stop, points)``'s arguments (a tuple, so that profiles can be cached)."""


@functools.lru_cache(maxsize=64)  # one composition per claim; a report asks the same claim for many panels
def pld_profile(noise_multiplier: float, sample_rate: float, steps: int, relation: Relation = "add_remove", *,
                grid: EpsilonGrid | None = None,
                discretization: float = VALUE_DISCRETIZATION) -> tuple[np.ndarray, np.ndarray]:
    """The privacy profile (ε grid, δ(ε) clipped to [0, 1]) of ``steps`` Poisson-subsampled (rate q) Gaussian steps
    with noise multiplier σ under ``relation``, from dp_accounting's composed PLD (pessimistic estimate, connect the
    dots; add/remove takes both directions), its privacy loss discretised at ``discretization``.

    ``grid``: a fixed ε grid; None (the curves): ``EPSILON_GRID`` points from 0 to 1 past the ε whose δ is
    ``TINY_DELTA`` (at least to 1, at most to 700). Both arrays are read-only."""
    from dp_accounting.pld import privacy_loss_distribution

    _check_relation(relation)
    if not 0 < sample_rate <= 1 or steps < 1 or noise_multiplier <= 0:
        raise ValueError("need 0 < sample_rate <= 1, steps >= 1, noise_multiplier > 0")
    pld = privacy_loss_distribution.from_gaussian_mechanism(
        noise_multiplier, sampling_prob=sample_rate, neighboring_relation=neighboring_relation(relation),
        value_discretization_interval=discretization,
    ).self_compose(steps)
    if grid is None:
        top = min(float(pld.get_epsilon_for_delta(TINY_DELTA)) + 1.0, 700.0)
        eps = np.linspace(0.0, max(top, 1.0), EPSILON_GRID)
    else:
        start, stop, points = grid
        eps = np.linspace(start, stop, points)
    deltas = np.clip(hockey_stick(pld, eps), 0.0, 1.0)
    eps.flags.writeable = False
    deltas.flags.writeable = False
    return eps, deltas


def hockey_stick(pld: Any, epsilons: np.ndarray) -> np.ndarray:
    """δ(ε) of a dp_accounting ``PrivacyLossDistribution`` at sorted ``epsilons``: its own
    ``get_delta_for_epsilon``, bit for bit, without its Python loop over the support (1.4 s for 4000 ε at a 1e-4
    discretisation, T = 250). The loop adds the probabilities, and each times e^{−loss}, from the largest loss down
    and reads the sums at each ε: the same sequential sums are cumulative sums of the reversed arrays."""
    from dp_accounting.pld.pld_pmf import DensePLDPmf

    eps = np.asarray(epsilons, dtype=np.float64)
    found = [getattr(pld, "_pmf_remove", None)] + ([] if getattr(pld, "_symmetric", True) else
                                                   [getattr(pld, "_pmf_add", None)])
    pmfs = [p for p in found if isinstance(p, DensePLDPmf)]
    if eps.ndim != 1 or np.any(np.diff(eps) < 0) or len(pmfs) < len(found):
        return np.asarray(pld.get_delta_for_epsilon(eps), dtype=np.float64)
    out: list[np.ndarray] = []
    for pmf in pmfs:
        losses = (np.arange(pmf.size) + pmf._lower_loss) * pmf._discretization
        probs = np.asarray(pmf._probs, dtype=np.float64)
        inf = pmf._infinity_mass
        upper = np.cumsum(np.concatenate([[inf], probs[::-1]]))
        lower = np.cumsum(np.concatenate([[0.0], (probs * np.exp(-losses))[::-1]]))
        above = losses.size - np.searchsorted(losses, eps, side="right")  # the losses above each ε
        with np.errstate(over="ignore", invalid="ignore"):
            delta = np.where(np.isposinf(eps), inf, upper[above] - np.exp(eps) * lower[above])
        out.append(delta)
    return out[0] if len(out) == 1 else np.maximum(out[0], out[1])  # remove, and add where it is not symmetric


def dpsgd_tradeoff(alpha: np.ndarray | float, noise_multiplier: float, sample_rate: float, steps: int,
                   relation: Relation = "add_remove") -> np.ndarray:
    """The trade-off function of DP-SGD as accounted (σ, q, T) under ``relation``: closed-form Gaussian DP for
    q = 1, the dual of dp_accounting's PLD profile for q < 1; f ≡ 0 without noise, the identity 1 − α at T = 0."""
    _check_relation(relation)
    alpha = np.clip(np.asarray(alpha, dtype=np.float64), 0.0, 1.0)
    if steps == 0:
        return 1.0 - alpha
    if noise_multiplier == 0:
        return np.zeros_like(alpha)
    if sample_rate >= 1.0:
        return gaussian_tradeoff(alpha, dpsgd_mu(noise_multiplier, steps, relation))
    eps, deltas = pld_profile(float(noise_multiplier), float(sample_rate), int(steps), relation)
    return tradeoff_from_profile(alpha, eps, deltas)


def implied_epsilon(alpha: np.ndarray, f: np.ndarray, delta: float) -> float:
    """The least ε for which the curve f (read at the points ``alpha``) lies above f_{ε,δ}: the (ε, δ) claim the
    curve implies, sup_α max(log((1 − δ − f(α))/α), log((1 − δ − α)/f(α)))."""
    alpha = np.asarray(alpha, dtype=np.float64)
    f = np.asarray(f, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where((alpha > 0) & (1 - delta - f > 0), np.log((1 - delta - f) / alpha), -np.inf)
        b = np.where((f > 0) & (1 - delta - alpha > 0), np.log((1 - delta - alpha) / f), -np.inf)
    return float(max(0.0, np.max(a), np.max(b)))


@dataclass(frozen=True)
class ClaimTradeoff:
    """One claim's reachable ROC region under one neighbouring relation.

    ``epsilon``/``delta``: the claim restated for the relation (add/remove: as claimed; replace-one: PLD for DP-SGD,
    group privacy otherwise); ``mechanism``: (σ, q, T) when the claim records DP-SGD's parameters, else None;
    ``mu``: the GDP parameter when q = 1; ``how``: one line for a legend."""

    relation: Relation
    epsilon: float
    delta: float
    mechanism: tuple[float, float, int] | None
    mu: float | None
    how: str

    def f(self, fpr: np.ndarray | float) -> np.ndarray | None:
        """The mechanism's trade-off function at ``fpr`` (None when the claim records no mechanism)."""
        if self.mechanism is None:
            return None
        sigma, q, steps = self.mechanism
        return dpsgd_tradeoff(fpr, sigma, q, steps, self.relation)

    def tpr_bound(self, fpr: np.ndarray | float) -> np.ndarray | None:
        """The largest TPR the claimed mechanism allows at ``fpr``: 1 − f(FPR) (None without a mechanism)."""
        f = self.f(fpr)
        return None if f is None else 1.0 - f

    def eps_delta_tpr_bound(self, fpr: np.ndarray | float) -> np.ndarray:
        """The largest TPR any (ε, δ)-DP mechanism allows at ``fpr``: min(e^ε·FPR + δ, 1 − e^{−ε}(1 − δ − FPR))."""
        return 1.0 - eps_delta_tradeoff(fpr, self.epsilon, self.delta)


def _mechanism(claim: Mapping[str, Any]) -> tuple[float, float, int] | None:
    sigma, q, steps = claim.get("noise_multiplier"), claim.get("sample_rate"), claim.get("steps")
    if sigma is None or q is None or steps is None:
        return None
    sigma, q, steps = float(sigma), float(q), int(steps)
    if not (math.isfinite(sigma) and sigma >= 0 and 0 < q <= 1 and steps >= 0):
        return None  # not a mechanism DP-SGD can run: the (ε, δ) region alone, never a crashed report
    return sigma, q, steps


def claim_tradeoff(claim: Mapping[str, Any], relation: Relation = "add_remove") -> ClaimTradeoff:
    """The trade-off of a recorded claim under ``relation``: "add_remove" (the audit game's canaries: one record
    added or removed) or "replace_one" (the membership game's member/non-member swap)."""
    _check_relation(relation)
    eps, delta = float(claim["epsilon"]), float(claim["delta"])
    mech = _mechanism(claim)
    if relation == "replace_one":
        # PLD under replace-one for a DP-SGD claim, group privacy for a bare one (or one whose σ, q, T cannot be run)
        restated = replace_one_claim(dict(claim) if mech is not None else {"epsilon": eps, "delta": delta})
        eps, delta = restated.epsilon, restated.delta
    words = "replace-one" if relation == "replace_one" else "add/remove"
    if mech is None:
        missing = _mechanism_keys(claim)
        return ClaimTradeoff(relation, eps, delta, None, None,
                             f"{'no mechanism recorded' if missing else 'mechanism out of range'}: "
                             f"only the ({words}) (ε, δ) region")
    sigma, q, steps = mech
    mu = dpsgd_mu(sigma, steps, relation) if q >= 1.0 else None
    if mu is not None:
        how = f"{words} Gaussian DP, μ = {mu:.3g} (σ = {sigma:.4g}, full batch, {steps} steps)"
    else:
        how = f"{words} dp_accounting PLD (σ = {sigma:.4g}, q = {q:.4g}, {steps} steps)"
    return ClaimTradeoff(relation, eps, delta, mech, mu, how)


def _mechanism_keys(claim: Mapping[str, Any]) -> bool:
    """Whether the claim lacks one of DP-SGD's parameters."""
    return any(claim.get(k) is None for k in ("noise_multiplier", "sample_rate", "steps"))


def _check_relation(relation: str) -> None:
    if relation not in RELATIONS:
        raise ValueError(f"unknown neighbouring relation {relation!r}; choose from {list(RELATIONS)}")
