"""The vulnerable-record protocol: complementary target pairs on random halves, groups that never hold a target
with what reveals its secret, leave-half-out shadows, the metrics over (canary, target) pairs with their operating
points, an interval that covers chance for a defense that leaks nothing, and one that flags a defense leaking its
hardest records while its population AUC stays put."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from arena.contracts.attack import Attack
from arena.contracts.spec import PluginRef
from arena.engine.recipe import Recipe
from arena.engine.seeds import derive_seed
from arena.games.membership import MembershipGame, MembershipGameSpec
from arena.games.membership.guess import MembershipGuess
from arena.games.membership.pools import train_pool
from arena.games.membership.vulnerable import (
    groups,
    plan_targets,
    resample,
    screen_risk,
    vulnerable_draws,
    vulnerable_metrics,
)
from arena.pipeline.plan import load_dataset
from arena.pipeline.procedure import TrainingProcedure
from arena_plugins.defenses import NonPrivate
from tests.conftest import architecture

M, BASE, C = 8, 120, 40


def spec(**game) -> MembershipGameSpec:
    return MembershipGameSpec.model_validate({"name": "membership", "members": BASE // 2, "test": 100,
                                             "population": 200, "targets": M, "canaries": {"count": C}, **game})


@pytest.fixture(scope="module")
def digits():
    return load_dataset(PluginRef(name="digits"))


def test_targets_come_in_complementary_pairs_of_random_halves() -> None:
    plan = plan_targets(BASE, C, M, seed=5)
    base, canary = plan.is_in[:, :BASE], plan.is_in[:, BASE:]
    assert (base.sum(axis=1) == BASE // 2).all() and (canary.sum(axis=1) == C // 2).all()
    assert (plan.is_in[0::2] ^ plan.is_in[1::2]).all(), "partners are complements"
    assert (canary.sum(axis=0) == M // 2).all(), "every canary is a member of exactly half the targets"
    assert len({tuple(r) for r in canary[0::2]}) == M // 2, "each pair draws its own half"
    assert not np.array_equal(plan_targets(BASE, C, M, seed=6).is_in, plan.is_in)
    with pytest.raises(ValueError, match="multiple of 4"):
        plan_targets(BASE, C, 6, seed=0)


@pytest.mark.parametrize("targets", [4, 8, 32])
def test_no_group_holds_two_partners_or_a_shadow_of_its_own_half(targets: int) -> None:
    found = groups(targets)
    attacked = [t for g in found for t in g.attacked]
    assert sorted(attacked) == list(range(targets)), "every target attacked once"
    for g in found:
        pairs = [t // 2 for t in g.attacked]
        assert len(set(pairs)) == len(pairs), "no two partners in one process"
        shadow_pairs = {t // 2 for t in range(targets)[g.shadows]}
        assert not shadow_pairs & set(pairs), "no shadow is a target of this group or its partner"
        assert g.shadows.stop - g.shadows.start == targets // 2


def test_the_spec_checks_the_protocol(digits) -> None:
    assert spec().vulnerable and spec().canary_spec.count == C
    assert MembershipGameSpec.model_validate({"name": "membership", "members": 10, "targets": 4}).canary_spec.count \
        == 256, "default canaries under the protocol"
    with pytest.raises(ValueError, match="multiple of 4"):
        spec(targets=6)
    with pytest.raises(ValueError, match="targets > 1"):
        spec(targets=1)
    assert MembershipGame.train_size(spec()) == BASE // 2 + C // 2
    assert MembershipGame.train_size(spec(canaries={"count": C, "kind": "duplicated"})) == BASE // 2 + 4 * C // 2
    assert MembershipGame.rank_metric_of(spec()) == "vr_tpr@0.1%fpr"
    assert MembershipGame.problems(spec(members=800), digits), "too many records is caught before any work"


def test_canaries_are_mislabelled_disjoint_and_secretly_assigned(digits) -> None:
    game = MembershipGame(spec(), digits, seed=3)
    rows = game.canaries.rows
    assert (game.canaries.y.numpy() != digits.y[rows]).all(), "a mislabelled canary never keeps its own label"
    others = np.concatenate([game.test, game.population, game.reference])
    challenge = game.challenge
    assert len(np.unique(challenge)) == BASE + C and not np.isin(others, challenge).any()
    X, y = game._target_training_sets()
    assert X.shape[:2] == (M, BASE // 2 + C // 2)
    ood = MembershipGame(spec(canaries={"count": C, "kind": "ood"}), digits, seed=3)
    assert (ood.canaries.rows == -1).all() and ood.canaries.X.shape == (C, *digits.X.shape[1:])


class Spy(Attack):
    name = "spy"
    game = "membership"
    threat_model = frozenset({"query", "training"})
    pools: list = []

    def run(self, view) -> MembershipGuess:
        pool = train_pool(view, 4)
        Spy.pools.append(pool)
        scores = -view.model.loss(view.challenge_X, view.challenge_y).numpy().reshape(-1)
        return MembershipGuess(scores, scores > np.median(scores))


def test_attacks_get_the_other_halfs_targets_as_their_pool_and_every_pair_is_scored(digits) -> None:
    game = MembershipGame(spec(), digits, seed=3)
    procedure = TrainingProcedure(NonPrivate(NonPrivate.Params()), architecture("mlp", (1, 8, 8), 10, hidden=[16]),
                                  Recipe(epochs=3, lr=0.1, batch_size=30), chunk=4)
    release = game.release(procedure)
    assert release.models.k == M
    Spy.pools = []
    views = game.view_groups(Spy(Spy.Params()), release, procedure)
    assert [len(g) for g in views] == [M // 4] * 4
    outcome = game.play(Spy(Spy.Params()), release, procedure)
    assert procedure.stats.trained == M, "the pools trained nothing: they are other targets"
    first = Spy.pools[0]  # target 0's pool: targets M/2 .. M/2+3, with their secret halves
    name = next(iter(first.models.state))
    assert torch.equal(first.models.state[name], release.models.part(M // 2, M // 2 + 4).state[name])
    assert np.array_equal(first.challenge_in, game._is_in[M // 2 : M // 2 + 4])
    m = outcome.metrics
    assert (m["vr_targets"], m["vr_canaries"], m["vr_nonmembers"]) == (M, C, M * C // 2)
    assert m["n_nonmembers"] == M * BASE // 2, "population metrics pool every target's base records"
    assert outcome.arrays["scores"].shape == (M * (BASE + C),)
    assert set(outcome.operating_points) >= {"vr_tpr@1%fpr"}
    with pytest.raises(ValueError, match="one guess per target"):
        game.score(Spy(Spy.Params()), MembershipGuess(np.zeros(BASE + C), np.zeros(BASE + C, bool)))


def null_interval_covers(reps: int, level: float, seed: int) -> float:
    """How often the 95 % interval of vr TPR at ``level`` covers the realised FPR when scores ignore membership."""
    rng = np.random.default_rng(seed)
    hits = 0
    for r in range(reps):
        is_in = plan_targets(0, 200, 32, seed=r).is_in
        scores = rng.normal(size=is_in.shape)
        metrics, points, _ = vulnerable_metrics(scores, is_in)
        key = f"vr_tpr@{level * 100:g}%fpr"
        draws = vulnerable_draws(scores, is_in, resamples=200, seed=r)[key]
        low, high = np.quantile(draws, [0.025, 0.975])
        hits += low <= points[key]["fpr"] <= high or low <= level <= high
    return hits / reps


@pytest.mark.slow
def test_a_defense_that_releases_nothing_gets_a_tpr_within_its_interval_of_the_fpr() -> None:
    """Simulated repetitions of a release independent of its data: the interval of TPR at 0.1 % and at 1 % FPR
    covers the FPR at least as often as its level says, less a simulation margin (40 repetitions: a true rate of
    95 % falls below 85 % with probability under 2 %)."""
    assert null_interval_covers(40, 0.001, seed=1) >= 0.85
    assert null_interval_covers(40, 0.01, seed=2) >= 0.85


@pytest.mark.slow
def test_a_defense_that_memorises_its_hardest_records_is_flagged_where_the_population_average_is_not(digits):
    """Two simulated defenses with the same population leakage; one memorises its canaries. Their population AUCs
    agree, the vulnerable-record TPR at 0.1 % FPR tells them apart with disjoint intervals."""
    game = MembershipGame(spec(targets=32, members=400, population=100, test=100, canaries={"count": 200}),
                          digits, seed=4)
    rng = np.random.default_rng(0)
    attack = Spy(Spy.Params())

    def play(canary_shift: float):
        guesses = []
        for t in [t for g in groups(32) for t in g.attacked]:
            shift = np.where(game._is_canary, canary_shift, 0.3)
            s = rng.normal(size=len(game.challenge)) + shift * game._is_in[t]
            guesses.append(MembershipGuess(s, s > 0))
        outcome = game.score_all(attack, guesses)
        draws = resample(outcome.arrays, ["auc", "vr_tpr@0.1%fpr"], resamples=300, seed=1)
        return outcome.metrics, np.quantile(draws["vr_tpr@0.1%fpr"], [0.025, 0.975])

    ordinary, (_, ordinary_high) = play(0.3)
    memoriser, (memoriser_low, _) = play(6.0)
    assert abs(ordinary["auc"] - memoriser["auc"]) < 0.02, "the population average cannot tell them apart"
    assert memoriser["vr_tpr@0.1%fpr"] > 0.5 > ordinary["vr_tpr@0.1%fpr"]
    assert memoriser_low > ordinary_high, "the vulnerable-record metric flags the memoriser"


@pytest.mark.slow
def test_vulnerable_canaries_are_the_screened_candidates_most_exposed_and_cached(digits, tmp_path) -> None:
    """``kind: vulnerable``: the canaries are the candidates a non-private screening pool finds most exposed, the
    same for a second game of the seed (read from the run's cache, nothing retrained), and they leak more than the
    population average under LiRA with the targets as shadows."""
    from arena.pipeline.tensorcache import TensorCache
    from arena_plugins.membership import LiRA

    game_spec = spec(targets=8, canaries={"count": 20, "kind": "vulnerable",
                                          "screen": {"models": 8, "epochs": 20, "candidates": 80}})
    procedure = TrainingProcedure(NonPrivate(NonPrivate.Params()), architecture("mlp", (1, 8, 8), 10, hidden=[64]),
                                  Recipe(epochs=20, lr=0.1, batch_size=32, momentum=0.9), chunk=8,
                                  cache=TensorCache(tmp_path))
    game = MembershipGame(game_spec, digits, seed=2)
    release = game.release(procedure)
    rows = game.canaries.rows
    assert len(rows) == 20 and np.isin(rows, game._candidates).all()
    assert (game.canaries.y.numpy() == digits.y[rows]).all(), "own labels"
    again = MembershipGame(game_spec, digits, seed=2)
    again._screen(procedure)
    assert np.array_equal(again.canaries.rows, rows), "the screening is cached: every configuration plays them"
    X, y = game.records(np.r_[game._base, game._candidates])
    risk = screen_risk(game_spec.canary_spec.screen, procedure.arch, X, y, derive_seed(game.seed, "screen"))
    top = game._candidates[np.argsort(-risk[len(game._base):], kind="stable")[:20]]
    assert set(rows.tolist()) == set(top.tolist()), "the 20 candidates of highest screened risk"
    lira = game.play(LiRA(LiRA.Params.model_validate({"shadows": 4})), release, procedure)
    assert lira.metrics["vr_auc"] > lira.metrics["auc"] + 0.02, "exposed records leak more than the average"
