"""The canary audit's statistics and verdict: which bounds speak for a claim, at which level, and when.

Per canary kind two tests, each at α/#tests (Bonferroni over 2 × #kinds, so one test at level α per matchup),
both **assumption-free** (valid for any mechanism that is (ε, δ)-DP in each canary's bit):

- the **one-run bound** (Steinke, Nasr & Jagielski 2023; guess set chosen on a held-out half);
- the **f-DP one-run analysis** (Mahloujifar, Melis & Chaudhuri 2025) on the same kind of counts: the largest ε
  whose (ε, δ)-DP trade-off curve it rejects and, where the claim records DP-SGD's σ, q and T, whether it rejects
  the claim's own curve (the release is not the mechanism its accounting describes). The claim's curve lies above
  the (ε, δ) curve of the claimed ε, so the ε bound exceeding the claim implies the curve's rejection: one event.

The **empirical ε** (the headline) is the largest of these 2 × #kinds lower bounds, jointly at 1 − α; flagged iff
it exceeds the claimed add/remove ε or a claim's curve is rejected.

**Model-based** (never the headline, never the verdict): for the white-box gradient canaries of a claim recording
σ, q and T whose release is the state ``train`` returned, the **Gaussian fit** (q = 1: the scores are Gaussian,
μ ≥ μ_lo) or the **σ fit** (q < 1: Cohen's d bounds σ from above, ε ≥ the optimistic PLD ε at that σ), at α.
Both *assume the release is the recorded DP-SGD* (and no data gradient reaching the canary's coordinate; measured
conservative where one does): ``model_based_epsilon``, labelled so wherever it is shown.

Estimates beside them: the held-out Clopper–Pearson bound, the one-threshold Gaussian-DP estimate, the f-DP
GDP-family estimate. Each test's false-positive rate is simulated in ``tests/privacy/test_one_run.py``,
``test_fdp_one_run.py``, ``test_sigma_fit.py`` and ``tests/games/audit/test_canaries.py``;
``tests/games/audit/test_verdict.py`` checks which tests join.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # types only: the rule that reads the verdict imports no torch
    from arena.contracts.defense import Claim
    from arena.games.audit.claim_check import ClaimCheck
from arena.privacy.accounting import epsilon_under
from arena.privacy.binomial import ALPHA
from arena.privacy.fdp_one_run import Fbar, FdpBound, claim_fbar, fdp_one_run
from arena.privacy.gdp import GaussianBound, GdpEstimate, gaussian_bound, gaussian_flags, gdp_estimate
from arena.privacy.heldout import HeldOutBound, heldout_epsilon
from arena.privacy.one_run import OneRunBound, one_run_epsilon, one_run_epsilon_batch
from arena.privacy.sigma_fit import SigmaFit, sigma_fit

MODEL_BASED = "model-based: assumes the release is the recorded DP-SGD"
"""The label of the Gaussian and σ fits wherever they are shown."""


def mechanism(claim: Mapping[str, Any] | Claim) -> tuple[float, float, int] | None:
    """(σ, q, T) when the claim records a DP-SGD mechanism that can be accounted at its δ (0 < δ < 1), else None."""
    c = claim.as_dict() if hasattr(claim, "as_dict") else claim
    sigma, q, steps = c.get("noise_multiplier"), c.get("sample_rate"), c.get("steps")
    if sigma is None or q is None or not steps or not 0 < float(c.get("delta") or 0.0) < 1:
        return None
    sigma, q, steps = float(sigma), float(q), int(steps)
    return (sigma, q, steps) if math.isfinite(sigma) and sigma > 0 and 0 < q <= 1 and steps > 0 else None


def fitted_kind(claim: Mapping[str, Any] | Claim, kinds: Sequence[str], trained: bool) -> str | None:
    """The kind whose model-based fit (Gaussian at q = 1, σ fit at q < 1) is the ``model_based_epsilon``: the
    white-box gradient canaries, when the claim records σ, q, T and the release is the trained state; else None."""
    return "gradient" if trained and "gradient" in kinds and mechanism(claim) is not None else None


def n_tests(claim: Mapping[str, Any] | Claim, kinds: Sequence[str], trained: bool) -> int:
    """The Bonferroni factor: per kind the one-run bound and the f-DP analysis (its ε bound and its test of the
    claim's curve are one event, see the module docstring); the model-based fit is not a test of the verdict."""
    return 2 * len(kinds)


@dataclass(frozen=True)
class KindResult:
    """One canary kind's scores and statistics at ``alpha_bound`` (α over the verdict's tests): ``one_run``,
    ``fdp`` (its ``claim_refuted`` in the verdict when a mechanism is recorded), ``fit`` (Gaussian fit) and
    ``sigma`` (σ fit; in the verdict for the fitted kind); ``heldout`` and ``gdp`` (estimates, at the audit's α)."""

    kind: str
    n_canaries: int
    included: int
    one_run: OneRunBound
    heldout: HeldOutBound
    gdp: GdpEstimate
    alpha_bound: float
    scores: np.ndarray = field(repr=False)
    truth: np.ndarray = field(repr=False)
    fit: GaussianBound | None = None
    fdp: FdpBound | None = None
    sigma: SigmaFit | None = None


@dataclass(frozen=True)
class CanaryAudit:
    """The result of one audit: the claim (add/remove), each canary kind's statistics, and the verdict."""

    claim: Claim
    claim_pld_epsilon: float | None  # the claim's σ, q, steps through the PLD accountant (add/remove)
    kinds: tuple[KindResult, ...]
    models: int
    alpha: float
    check: ClaimCheck | None = None
    """What the engine saw the defense run (``check_claim``): the mechanisms composed by PLD as they ran
    (add/remove, at the claimed δ; ∞ without noise), a deterministic check of the claim's arithmetic, and whether
    the release is the state ``train`` returned."""
    gaussian: str | None = None
    """The kind whose model-based fit (Gaussian at q = 1, σ fit at q < 1) applies, None where none does."""

    @property
    def mechanism_epsilon(self) -> float | None:
        """The composed PLD ε of the mechanisms the release ran (None where it could not be recomputed)."""
        return None if self.check is None else self.check.epsilon

    @property
    def lower_bound(self) -> float:
        """The empirical ε (headline): the largest of the verdict's assumption-free lower bounds, so ε ≥ this with
        confidence 1 − α whatever the mechanism."""
        return max(self.bounds().values())

    def bounds(self) -> dict[str, float]:
        """The verdict's assumption-free figures by name (``<kind>.one_run``, ``<kind>.fdp``)."""
        out = {f"{k.kind}.one_run": k.one_run.epsilon for k in self.kinds}
        out |= {f"{k.kind}.fdp": k.fdp.epsilon for k in self.kinds if k.fdp is not None}
        return out

    @property
    def model_based_epsilon(self) -> float | None:
        """The fitted kind's Gaussian or σ fit (at α): it assumes the release is the recorded DP-SGD, so it is
        labelled model-based and is neither the headline nor part of the verdict; None where no fit applies."""
        for k in self.kinds:
            if k.kind == self.gaussian:
                fit = k.sigma if k.sigma is not None else k.fit
                return None if fit is None else fit.epsilon
        return None

    @property
    def curve_refuted(self) -> bool:
        """The claim's own trade-off curve rejected by a kind's f-DP one-run test (at α/#tests)."""
        return any(k.fdp is not None and k.fdp.claim_refuted for k in self.kinds)

    @property
    def flagged(self) -> bool:
        """Refuted at level α: a verdict figure exceeds the claimed add/remove ε, or the claim's curve is rejected."""
        return self.lower_bound > self.claim.epsilon or self.curve_refuted

    @property
    def claim_consistent(self) -> bool:
        """The mechanism run is as private as claimed (its own accounting; True when it could not be recomputed)."""
        if self.mechanism_epsilon is None:
            return True
        return self.mechanism_epsilon <= self.claim.epsilon * (1 + 1e-6) + 1e-9

    @property
    def violation(self) -> bool:
        """Refuted by the canaries (level α) or by recomputing the claim from the mechanism actually run."""
        return self.flagged or not self.claim_consistent

    @property
    def claim_check(self) -> str:
        """The claim check's word: ``consistent``, ``violation`` (the mechanism run, composed as it ran, exceeds
        the claim) or ``cannot decide`` (how its calls compose cannot be verified; no violation is declared)."""
        if self.check is not None and not self.check.decided:
            return "cannot decide"
        return "consistent" if self.claim_consistent else "violation"

    def metrics(self) -> dict[str, float | int | bool | str]:
        out: dict[str, float | int | bool | str] = {
            "claimed_epsilon": self.claim.epsilon, "delta": self.claim.delta, "models": self.models,
            "alpha": self.alpha, "empirical_epsilon": self.lower_bound, "flagged": self.flagged,
            "claim_consistent": self.claim_consistent, "claim_check": self.claim_check, "violation": self.violation,
            "curve_refuted": self.curve_refuted,
        }
        if self.model_based_epsilon is not None:
            out |= {"model_based_epsilon": self.model_based_epsilon, "model_based": MODEL_BASED}
        if self.check is not None:
            out |= {f"mechanism_{k}": v for k, v in self.check.as_dict().items() if v is not None}
        if self.claim_pld_epsilon is not None:
            out["claimed_epsilon_pld"] = self.claim_pld_epsilon
        for k in self.kinds:
            p = k.kind
            out |= {
                f"{p}.canaries": k.n_canaries, f"{p}.included": k.included,
                f"{p}.one_run_epsilon": k.one_run.epsilon, f"{p}.one_run_alpha": k.alpha_bound,
                f"{p}.one_run_max_certifiable": k.one_run.max_certifiable,
                f"{p}.one_run_guesses": k.one_run.guesses, f"{p}.one_run_correct": k.one_run.correct,
                f"{p}.heldout_epsilon": k.heldout.epsilon, f"{p}.heldout_max_certifiable": k.heldout.max_certifiable,
                f"{p}.gdp_epsilon": k.gdp.epsilon, f"{p}.gdp_mu_lo": k.gdp.mu_lo,
            }
            if k.fit is not None:
                out |= {f"{p}.gdp_fit_epsilon": k.fit.epsilon, f"{p}.gdp_fit_mu": k.fit.mu_hat,
                        f"{p}.gdp_fit_mu_lo": k.fit.mu_lo, f"{p}.gdp_fit_se": k.fit.se,
                        f"{p}.gdp_fit_model_based": k.kind == self.gaussian and k.sigma is None}
            if k.fdp is not None:
                out |= {f"{p}.fdp_epsilon": k.fdp.epsilon, f"{p}.fdp_gdp_epsilon": k.fdp.gdp_epsilon,
                        f"{p}.fdp_max_gdp_epsilon": k.fdp.max_gdp_epsilon}
                if k.fdp.claim_refuted is not None:
                    out[f"{p}.fdp_claim_refuted"] = k.fdp.claim_refuted
            if k.sigma is not None:
                out |= {f"{p}.sigma_fit_epsilon": k.sigma.epsilon, f"{p}.sigma_fit_sigma_hi": k.sigma.sigma_hi,
                        f"{p}.sigma_fit_d": k.sigma.d_hat, f"{p}.sigma_fit_se": k.sigma.se}
        return out


def flag_batch(kinds: Sequence[tuple[np.ndarray, np.ndarray]], claimed_epsilon: float, delta: float = 0.0,
               alpha: float = ALPHA, seed: int = 0, gaussian: int | None = None) -> np.ndarray:
    """The verdict of one-run bounds (and a Gaussian fit) for R experiments at once: ``kinds`` holds, per kind,
    scores (R, n) and truths (n,) or (R, n); ``gaussian`` the index of the kind whose Gaussian fit joins. Flagged
    iff one of the bounds, each at α/#bounds (Bonferroni), exceeds ``claimed_epsilon``. Returns (R,) booleans."""
    a = alpha / (len(kinds) + (gaussian is not None))
    flags = np.zeros(len(np.atleast_2d(kinds[0][0])), dtype=bool)
    for s, t in kinds:
        flags |= one_run_epsilon_batch(s, t, a, delta, seed=seed) > claimed_epsilon
    if gaussian is not None:
        flags |= gaussian_flags(*kinds[gaussian], claimed_epsilon, delta, a)
    return flags


def verdict_bounds(claim: Mapping[str, Any] | Claim, name: str, scores: np.ndarray, truth: np.ndarray, a: float,
                   fitted: bool, seed: int, curve: Fbar | None, alpha_fit: float | None = None
                   ) -> tuple[OneRunBound, FdpBound, GaussianBound | None, SigmaFit | None]:
    """One kind's verdict tests at level ``a``: one-run and f-DP (its (ε, δ) bound, and the test of ``curve``
    when a mechanism is recorded); for the ``fitted`` kind, the model-based Gaussian fit (q = 1) or σ fit (q < 1)
    at ``alpha_fit`` (default ``a``), outside the verdict."""
    c = claim.as_dict() if hasattr(claim, "as_dict") else claim
    delta = float(c["delta"])
    s, t = scores.reshape(-1), truth.reshape(-1).astype(bool)
    one = one_run_epsilon(s, t, a, delta, seed=seed)
    mech = mechanism(c)
    fdp = fdp_one_run(s, t, a, delta, claim=curve if mech is not None else None, seed=seed)
    fit = sigma = None
    af = a if alpha_fit is None else alpha_fit
    if fitted and mech is not None:
        if mech[1] >= 1.0:
            fit = gaussian_bound(s, t, delta, af)
        else:
            sigma = sigma_fit(s, t, mech[1], mech[2], delta, af)
    return one, fdp, fit, sigma


def analyse(claim: Claim, scores: dict[str, np.ndarray], truths: dict[str, np.ndarray], models: int,
            alpha: float = ALPHA, seed: int = 0, check: ClaimCheck | None = None) -> CanaryAudit:
    """The statistics of an audit from each canary kind's scores and truths (see the module docstring): the
    verdict's tests each at α/#tests (Bonferroni), held-out Clopper–Pearson and Gaussian-DP threshold estimates
    at α. Without a ``check`` the scores are taken as the trained state's."""
    if not scores or sorted(scores) != sorted(truths):
        raise ValueError(f"need scores and truths of the same canary kinds, got {sorted(scores)} and {sorted(truths)}")
    trained = check is None or check.trained_release
    fitted = fitted_kind(claim, list(scores), trained)
    a = alpha / n_tests(claim, list(scores), trained)
    mech = mechanism(claim)
    curve = claim_fbar(*mech) if mech is not None else None
    kinds = []
    for name in scores:
        s, t = np.asarray(scores[name], np.float64), np.asarray(truths[name]).astype(bool)
        if s.shape != t.shape:
            raise ValueError(f"{name}: scores of shape {s.shape} for truths of shape {t.shape}")
        if not np.all(np.isfinite(s)):
            raise ValueError(f"{name}: canary scores contain NaN or infinity")
        s, t = s.reshape(-1), t.reshape(-1)
        one, fdp, fit, sig = verdict_bounds(claim, name, s, t, a, name == fitted, seed, curve, alpha)
        if fit is None and sig is None and len(s) >= 4:  # shown as an estimate where it is not a bound
            fit = gaussian_bound(s, t, claim.delta, alpha)
        kinds.append(KindResult(
            kind=name, n_canaries=len(s), included=int(t.sum()), one_run=one,
            heldout=heldout_epsilon(s, t, claim.delta, alpha, seed=seed),
            gdp=gdp_estimate(s, t, claim.delta, alpha, seed=seed),
            alpha_bound=a, scores=s, truth=t, fit=fit, fdp=fdp, sigma=sig))
    pld = None
    if mech is not None:
        pld = epsilon_under(mech[0], mech[1], mech[2], claim.delta)
    return CanaryAudit(claim, pld, tuple(kinds), models, alpha, check, fitted)
