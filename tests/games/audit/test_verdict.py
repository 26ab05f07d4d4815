"""arena.games.audit.verdict: which tests join the canary audit's verdict, at which Bonferroni level, and that on
synthetic Poisson-subsampled Dirac canaries a correct claim stands while half the noise is refuted by the
canaries' own assumption-free tests (the f-DP test of the claim's curve), not by the claim check; the headline
empirical ε is the assumption-free bound and the σ fit is labelled model-based wherever it is rendered."""

from __future__ import annotations

import math

import numpy as np
import pytest

from arena.contracts.defense import Claim
from arena.games.audit.claim_check import ClaimCheck
from arena.games.audit.verdict import analyse, fitted_kind, mechanism, n_tests
from arena.privacy.accounting import calibrate_noise

Q, T, DELTA = 0.2, 250, 1e-5


def test_which_tests_join_and_the_bonferroni_factor() -> None:
    sub = {"epsilon": 4.0, "delta": DELTA, "noise_multiplier": 3.5, "sample_rate": Q, "steps": T}
    bare = {"epsilon": 4.0, "delta": DELTA}
    assert mechanism(sub) == (3.5, Q, T) and mechanism(bare) is None
    assert mechanism({**sub, "noise_multiplier": float("inf")}) is None and mechanism({**sub, "delta": 0.0}) is None
    assert fitted_kind(sub, ["gradient", "input"], True) == "gradient"
    assert fitted_kind(sub, ["gradient"], False) is None and fitted_kind(bare, ["gradient"], True) is None
    assert n_tests(sub, ["gradient", "input"], True) == 4  # one-run ×2, f-DP ×2; the σ fit is not a test
    assert n_tests(sub, ["gradient"], False) == 2 and n_tests(bare, ["gradient", "input"], True) == 4


def _scores(sigma: float, K: int, m: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    bits = rng.random((K, m)) < 0.5
    return rng.binomial(T, Q, size=(K, m)) * bits + rng.normal(size=(K, m)) * math.sqrt(T) * sigma, bits


@pytest.mark.slow  # the claim's PLD curve and the accountant: a few seconds of CPU
def test_half_the_noise_is_refuted_by_the_canaries_and_a_correct_claim_stands() -> None:
    rng = np.random.default_rng(3)
    sigma, eps = calibrate_noise(4.0, Q, T, DELTA, "pld")
    claim = Claim(epsilon=eps, delta=DELTA, accountant="pld", noise_multiplier=sigma, sample_rate=Q, steps=T)
    check = ClaimCheck(eps, 1, 0, 0, True)  # what the engine saw: the claim's own arithmetic holds
    s, t = _scores(sigma, 64, 128, rng)
    ok = analyse(claim, {"gradient": s}, {"gradient": t}, 64, check=check)
    assert ok.gaussian == "gradient" and set(ok.bounds()) == {"gradient.one_run", "gradient.fdp"}
    assert ok.kinds[0].alpha_bound == pytest.approx(0.05 / 2)
    assert ok.model_based_epsilon == ok.kinds[0].sigma.epsilon and ok.kinds[0].sigma.alpha == 0.05
    assert not ok.flagged and 0 < ok.lower_bound <= eps
    s, t = _scores(sigma / 2, 64, 128, rng)
    bad = analyse(claim, {"gradient": s}, {"gradient": t}, 64, check=check)
    assert bad.kinds[0].sigma.epsilon > 2 * eps and bad.curve_refuted and bad.flagged and bad.claim_consistent
    assert bad.lower_bound == max(bad.kinds[0].one_run.epsilon, bad.kinds[0].fdp.epsilon)
    print(f"\nsubsampled (q = {Q}, T = {T}), 8,192 canaries, claim ε = {eps:.2f}: correct run ε ≥ "
          f"{ok.lower_bound:.2f}; "
          f"half the noise: σ fit ε ≥ {bad.kinds[0].sigma.epsilon:.2f}, one-run {bad.kinds[0].one_run.epsilon:.2f}, "
          f"claim's curve rejected {bad.curve_refuted}")


@pytest.mark.slow  # two f-DP analyses and a σ fit on 8,192 scores
def test_the_headline_is_the_assumption_free_bound_and_the_fit_is_rendered_as_model_based() -> None:
    from arena.games.audit.rule import audit_game
    from arena.games.audit.verdict import MODEL_BASED

    rng = np.random.default_rng(4)
    sigma, eps = 1.0, 8.0  # a claim far above what the canaries can certify: no violation either way
    claim = Claim(epsilon=eps, delta=DELTA, accountant="pld", noise_multiplier=sigma, sample_rate=Q, steps=T)
    s, t = _scores(sigma, 64, 128, rng)
    a = analyse(claim, {"gradient": s}, {"gradient": t}, 64, check=ClaimCheck(eps, 1, 0, 0, True))
    k = a.kinds[0]
    assert a.lower_bound == max(k.one_run.epsilon, k.fdp.epsilon) > 0  # the headline: assumption-free
    assert a.model_based_epsilon == k.sigma.epsilon != a.lower_bound  # the σ fit: beside it, not it
    m = a.metrics()
    assert m["empirical_epsilon"] == a.lower_bound and m["model_based_epsilon"] == k.sigma.epsilon
    assert m["model_based"] == MODEL_BASED
    row = {"key": "k", "track": "t", "defense_label": "dpsgd", "attack_label": "canary-auditor", "seed": 0,
           "game": "audit", "status": "ok", "claim": claim.as_dict(),
           "metrics": {"alpha": 0.05, "release_is_trained": True, "models": 64, "claim_consistent": True}}
    found = audit_game([row], lambda key: {"gradient_scores": s, "gradient_truth": t})
    rec, = found.records
    assert rec.lower_bound == pytest.approx(max(rec.bounds[0][1].epsilon, rec.fdp[0][1].epsilon))
    assert rec.model_based_epsilon == rec.sigma.epsilon and not rec.violation
    line, = found.lines
    assert f"empirical ε ≥ {rec.lower_bound:.3f} (assumption-free" in line
    assert f"σ-fit ε ≥ {rec.sigma.epsilon:.3f}" in line and MODEL_BASED in line and "not the headline" in line
