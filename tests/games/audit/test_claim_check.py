"""The claim check composes every mechanism a release ran, and the Gaussian fit joins the verdict only when the
release is the state ``train`` returned."""

import math

import numpy as np
import pytest
import torch

from arena.contracts.defense import Claim, Fit, FitTask
from arena.engine.architecture import Architecture
from arena.engine.instruments import AuditInstruments, LaplaceDraw, Mechanism, state_digest
from arena.engine.laplace import laplace
from arena.engine.recipe import DPNoise, Recipe
from arena.engine.trainer import train
from arena.games.audit.canaries import CanarySpec, analyse, audit
from arena.games.audit.claim_check import ClaimCheck, check_claim
from arena.privacy.composition import composed_epsilon
from arena.privacy.gdp import gdp_mu
from arena_plugins.defenses import DPSGD
from arena_plugins.models import MLP

EPS, DELTA = 1.0, 1e-5
ARCH = Architecture(MLP(MLP.Params(hidden=[8])), (10,), 3)
RECIPE = Recipe(epochs=3, lr=0.5)  # full batch
SPEC = CanarySpec(models=4, gradient=32, seed=5)


def _data(n: int = 60, d: int = 10):
    g = torch.Generator().manual_seed(1)
    y = torch.randint(0, 3, (n,), generator=g)
    return torch.randn(n, d, generator=g), y


class TrainsTwice(DPSGD):
    """Two DP-SGD runs, each calibrated to the full ε, the second from the first's state; claims one run's ε."""

    name = "trains-twice"

    def fit(self, task: FitTask) -> Fit:
        once = super().fit(task)
        assert once.claim is not None and once.claim.noise_multiplier is not None
        noise = DPNoise(clip=self.params.clip, noise_multiplier=once.claim.noise_multiplier)
        state = train(task.arch, task.X, task.y, task.recipe, task.init_seeds, task.train_seeds, dp=noise,
                      state=once.state)
        return Fit(state, once.claim)


class ClippedRelease(DPSGD):
    """Correct DP-SGD whose released weights are clipped to [−c, c]: post-processing, exactly as private."""

    name = "clipped-release"

    def fit(self, task: FitTask) -> Fit:
        out = super().fit(task)
        return Fit({k: v.clamp(-0.05, 0.05) for k, v in out.state.items()}, out.claim)


def _defense(cls):
    return cls(DPSGD.Params(epsilons=[EPS], delta=DELTA, accountant="rdp"))


@pytest.mark.slow  # three small audits with PLD accounting: a few seconds of CPU
def test_a_defense_that_trains_twice_at_the_full_epsilon_is_refuted_by_the_claim_check():
    X, y = _data()
    once, twice = (audit(_defense(c), ARCH, RECIPE, X, y, SPEC) for c in (DPSGD, TrainsTwice))
    assert once.check.runs == 1 and once.claim_consistent and once.check.trained_release
    assert twice.claim.epsilon == pytest.approx(once.claim.epsilon)  # the same claim
    assert twice.check.runs == 2 and not twice.claim_consistent and twice.violation
    # full batch, T steps at σ, twice: μ = √(2T)/σ, one run's μ times √2, so ε well above one run's (and the claim)
    sigma, steps = twice.claim.noise_multiplier, twice.claim.steps
    assert twice.mechanism_epsilon == pytest.approx(composed_epsilon([(sigma, 1.0, 2 * steps)], [], DELTA))
    assert twice.mechanism_epsilon > 1.3 * twice.claim.epsilon > 1.3 * once.mechanism_epsilon
    assert twice.check.trained_release and twice.gaussian == "gradient"  # the release is the second call's state


@pytest.mark.slow
def test_a_clipped_release_keeps_the_gaussian_fit_out_of_the_verdict():
    X, y = _data()
    a = audit(_defense(ClippedRelease), ARCH, RECIPE, X, y, SPEC)
    assert not a.check.trained_release and a.gaussian is None
    # the one-run bound and the f-DP test of the claim's curve, α/2 each (no fit)
    assert set(a.bounds()) == {"gradient.one_run"} and a.kinds[0].alpha_bound == SPEC.alpha / 2
    assert a.claim_consistent and not a.violation
    assert not a.metrics()["gradient.gdp_fit_in_verdict"]


@pytest.mark.slow  # the one-run bound over 32,768 scores: several seconds of CPU
def test_clipping_the_scores_of_a_true_claim_fakes_a_violation_that_the_gate_prevents():
    """Scores Gaussian with Cohen's d = μ exactly at the claim (ε = 8), then clipped to ±μ/2 (post-processing, as
    private): Cohen's d rises above μ, so the Gaussian fit would refute a true claim; a release that is not the
    trained state leaves the fit out and the one-run bound does not refute it."""
    eps = 8.0
    mu = gdp_mu(eps, DELTA)
    rng = np.random.default_rng(0)
    truth = rng.random((64, 512)) < 0.5
    scores = np.clip(rng.normal(size=truth.shape) + mu * (truth - 0.5), -mu / 2, mu / 2)
    # a claim whose recorded mechanism is exactly that μ (one full-batch step at σ = 1/μ): its own curve holds too
    claim = Claim(epsilon=eps, delta=DELTA, accountant="test", noise_multiplier=1 / mu, sample_rate=1.0, steps=1)
    trained = ClaimCheck(eps, 1, 0, 0, True)
    post = ClaimCheck(eps, 1, 0, 0, False)
    naive = analyse(claim, {"gradient": scores}, {"gradient": truth}, 64, check=trained)
    assert naive.gaussian == "gradient" and naive.kinds[0].fit.mu_lo > mu and naive.flagged  # the false violation
    gated = analyse(claim, {"gradient": scores}, {"gradient": truth}, 64, check=post)
    assert gated.gaussian is None and not gated.flagged and not gated.violation
    assert gated.kinds[0].fdp.claim_refuted is False  # post-processing keeps the f-DP test valid


def test_the_check_composes_declared_laplace_draws_and_counts_the_others():
    inst = AuditInstruments(runs=[Mechanism(1.0, 2.0, 1.0, 3)],
                            laplace=[LaplaceDraw(0.5, 1.0), LaplaceDraw(0.5, None)])
    state = {"w": torch.ones(2, 3)}
    inst.returned.append(state_digest(state))
    c = check_claim(inst, DELTA, state)
    assert (c.runs, c.laplace, c.unaccounted, c.trained_release) == (1, 1, 1, True)
    assert c.epsilon == pytest.approx(composed_epsilon([(2.0, 1.0, 3)], [0.5], DELTA))
    assert not check_claim(inst, DELTA, {"w": torch.ones(2, 3) * (1 + 1e-7)}).trained_release  # any change
    assert check_claim(AuditInstruments(runs=[Mechanism(1.0, 0.0, 1.0, 3)]), DELTA, state).epsilon == math.inf


def test_the_engine_records_laplace_draws_and_returned_states_inside_an_audit_only():
    from arena.engine.instruments import instrumented

    seeds = torch.arange(2)
    laplace(seeds, 7, 3, 1.0, l1_sensitivity=2.0)  # outside: nothing to record into
    inst = AuditInstruments(present=torch.ones(2, 6, dtype=torch.bool))
    X, y = torch.randn(2, 6, 10), torch.randint(0, 3, (2, 6))
    with instrumented(inst):
        laplace(seeds, 7, 3, 1.0, l1_sensitivity=2.0)
        state = train(ARCH, X, y, Recipe(epochs=1, lr=0.1), seeds, seeds, dp=DPNoise(1.0, 1.0))
    assert inst.laplace == [LaplaceDraw(1.0, 2.0)] and inst.calls == 1
    assert inst.returned == [state_digest(state)]
