"""The claim check composes the mechanisms a release ran as they ran (sequential on the same records, parallel over
a data-independent partition, "cannot decide" otherwise), and the model-based fits need the release to be the state
``train`` returned."""

import math

import numpy as np
import pytest
import torch

from arena.contracts.defense import Claim, Fit, FitTask
from arena.engine.architecture import Architecture
from arena.engine.digests import record_digests
from arena.engine.instruments import AuditInstruments, LaplaceDraw, Mechanism, state_digest
from arena.engine.laplace import laplace
from arena.engine.partition import hash_partition
from arena.engine.recipe import DPNoise, Recipe
from arena.engine.trainer import train
from arena.games.audit.canaries import CanarySpec, analyse, audit
from arena.games.audit.claim_check import ClaimCheck, check_claim, composition
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


class TrainsHalves(DPSGD):
    """Correct parallel composition: the records split by ``hash_partition`` (a hash of each record alone), one
    DP-SGD call per half at the full ε, the second from the first's state; each record meets one call."""

    name = "trains-halves"

    def train_private(self, task: FitTask, noise: DPNoise) -> dict[str, torch.Tensor]:
        state = None
        for idx in hash_partition(task.X[0], task.y[0], 2):
            state = train(task.arch, task.X[:, idx], task.y[:, idx], task.recipe, task.init_seeds, task.train_seeds,
                          dp=noise, state=state)
        return state


class MedianHalves(DPSGD):
    """Disjoint halves split at the median of the first feature: a split that depends on the data, which the
    check cannot verify is a data-independent partition."""

    name = "median-halves"

    def train_private(self, task: FitTask, noise: DPNoise) -> dict[str, torch.Tensor]:
        order = torch.argsort(task.X[0, :, 0])
        state = None
        for idx in (order[: len(order) // 2], order[len(order) // 2 :]):
            state = train(task.arch, task.X[:, idx], task.y[:, idx], task.recipe, task.init_seeds, task.train_seeds,
                          dp=noise, state=state)
        return state


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


@pytest.mark.slow  # two small audits with PLD accounting
def test_two_disjoint_halves_of_a_data_independent_partition_compose_in_parallel():
    X, y = _data()
    once, halves = (audit(_defense(c), ARCH, RECIPE, X, y, SPEC) for c in (DPSGD, TrainsHalves))
    c = halves.check
    assert c.runs == 2 and c.composition == "parallel" and c.cells == 2 and c.decided
    assert c.epsilon == pytest.approx(once.mechanism_epsilon)  # each record meets one call at the full ε
    assert c.sequential_epsilon > 1.3 * halves.claim.epsilon  # what the old sequential check declared
    assert halves.claim_consistent and halves.claim_check == "consistent" and not halves.violation
    assert halves.metrics()["mechanism_composition"] == "parallel"


@pytest.mark.slow
def test_a_data_dependent_split_is_reported_as_cannot_decide_not_as_a_violation():
    X, y = _data()
    a = audit(_defense(MedianHalves), ARCH, RECIPE, X, y, SPEC)
    assert a.check.runs == 2 and a.check.composition == "undecided" and not a.check.decided
    assert a.check.epsilon is None and a.check.sequential_epsilon > 1.3 * a.claim.epsilon
    assert a.claim_check == "cannot decide" and a.metrics()["claim_check"] == "cannot decide"
    assert not a.violation


@pytest.mark.slow  # PLD compositions: a second of CPU
def test_the_composition_follows_the_calls_record_sets():
    def runs(*covers):
        return [Mechanism(1.0, 2.0, 1.0, 3, c) for c in covers]

    assert composition(runs("all")) == ("single", 0)
    assert composition(runs("all", "all")) == ("sequential", 0)
    assert composition(runs("cell:2:0", "cell:2:1")) == ("parallel", 2)
    assert composition(runs("all", "cell:3:0", "cell:3:2")) == ("parallel", 3)
    assert composition(runs("cell:2:0", "cell:3:1"))[0] == "undecided"  # two partitions
    assert composition(runs("subset:a", "subset:b"))[0] == "undecided"
    assert composition(runs("all", "unknown"))[0] == "undecided"
    inst = AuditInstruments(runs=runs("all", "cell:2:0", "cell:2:0", "cell:2:1"))
    c = check_claim(inst, DELTA, {})
    # cell 0 meets three calls, cell 1 two: the larger is the mechanism's ε
    assert c.epsilon == pytest.approx(composed_epsilon([(2.0, 1.0, 3)] * 3, [], DELTA))
    assert c.sequential_epsilon == pytest.approx(composed_epsilon([(2.0, 1.0, 3)] * 4, [], DELTA))


def test_the_engine_records_which_records_each_call_trained_on():
    from arena.engine.instruments import instrumented

    X, y = _data(20)
    inst = AuditInstruments(present=torch.ones(2, 20, dtype=torch.bool), records=record_digests(X, y))
    Xs, ys = X.expand(2, *X.shape).contiguous(), y.expand(2, *y.shape).contiguous()
    seeds = torch.arange(2)
    with instrumented(inst):
        parts = hash_partition(X, y, 2)
        for idx in (torch.arange(20).flip(0), *parts, torch.arange(5)):
            train(ARCH, Xs[:, idx].double(), ys[:, idx], Recipe(epochs=1, lr=0.1), seeds, seeds, dp=DPNoise(1.0, 1.0))
        with pytest.raises(ValueError, match="not the audit's records|presence mask"):  # rows it cannot place
            train(ARCH, Xs[:, :5] + 1, ys[:, :5], Recipe(epochs=1, lr=0.1), seeds, seeds, dp=DPNoise(1.0, 1.0))
    assert inst.partitions == [2] and sorted(torch.cat(parts).tolist()) == list(range(20))
    covers = [r.cover for r in inst.runs]
    assert covers[:3] == ["all", "cell:2:0", "cell:2:1"] and covers[3].startswith("subset:") and len(covers) == 4
    assert inst.cover(inst.locate(Xs[:, :5] + 1, ys[:, :5])) == "unknown"
    assert inst.locate(torch.stack([X, X.flip(0)]), torch.stack([y, y.flip(0)])) is None  # rows differ per model


@pytest.mark.slow
def test_a_clipped_release_keeps_the_gaussian_fit_out_of_the_verdict():
    X, y = _data()
    a = audit(_defense(ClippedRelease), ARCH, RECIPE, X, y, SPEC)
    assert not a.check.trained_release and a.gaussian is None
    # the one-run bound and the f-DP test of the claim's curve, α/2 each (no fit)
    assert set(a.bounds()) == {"gradient.one_run", "gradient.fdp"} and a.kinds[0].alpha_bound == SPEC.alpha / 2
    assert a.claim_consistent and not a.violation
    assert not a.metrics()["gradient.gdp_fit_model_based"] and a.model_based_epsilon is None


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
    # the model-based fit would declare a false violation; it is labelled so and kept out of the verdict
    assert naive.gaussian == "gradient" and naive.kinds[0].fit.mu_lo > mu and naive.model_based_epsilon > eps
    assert not naive.flagged
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
