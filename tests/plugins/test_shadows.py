"""The shared shadow pool: IN/OUT bookkeeping that never touches the secret, determinism, one cached training."""

from __future__ import annotations

import numpy as np
import pytest

from arena.contracts.spec import PluginRef
from arena.engine.recipe import Recipe
from arena.games.membership import MembershipGame, MembershipGameSpec
from arena.games.membership.pools import plan_pool, train_pool
from arena.pipeline.plan import load_dataset
from arena.pipeline.procedure import TrainingProcedure
from arena.pipeline.store import TensorCache
from arena_plugins.defenses import NonPrivate
from arena_plugins.membership import LiRA, ShadowMIA
from tests.conftest import architecture


@pytest.fixture
def game() -> MembershipGame:
    return MembershipGame(MembershipGameSpec(name="membership", members=30, test=50, population=100),
                          load_dataset(PluginRef(name="digits")), seed=5)


def procedure(cache: TensorCache) -> TrainingProcedure:
    return TrainingProcedure(NonPrivate(NonPrivate.Params()), architecture("mlp", (1, 8, 8), 10, hidden=[8]),
                             Recipe(epochs=2, lr=0.1, batch_size=16), cache=cache)


def test_each_shadow_trains_on_one_half_and_each_point_is_in_for_exactly_half_the_shadows() -> None:
    plan = plan_pool(n_challenge=20, train_size=10, k=8, pool_seed=11)
    assert plan.rows.shape == (8, 10) and plan.challenge_in.shape == (8, 20)
    for rows, mask in zip(plan.rows, plan.challenge_in):
        assert len(set(rows.tolist())) == 10 and set(np.flatnonzero(mask).tolist()) == set(rows.tolist())
    assert np.all(plan.challenge_in.sum(axis=0) == 4)
    assert not np.any(plan.challenge_in[0::2] & plan.challenge_in[1::2]), "pairs are complementary halves"
    assert len({tuple(r) for r in plan.rows}) == 8, "no two shadows share a training set"
    assert len(set(plan.init_seeds.tolist()) | set(plan.train_seeds.tolist())) == 16


def test_the_plan_depends_on_sizes_and_pool_seed_only() -> None:
    a, b = plan_pool(40, 20, 6, 3), plan_pool(40, 20, 6, 3)
    assert all(np.array_equal(x, y) for x, y in zip(vars(a).values(), vars(b).values()))
    assert not np.array_equal(plan_pool(40, 20, 6, 4).rows, a.rows)
    assert not np.array_equal(plan_pool(40, 20, 8, 3).rows[:6], a.rows)


def test_a_pool_needs_an_even_count_and_two_challenge_points_per_record() -> None:
    with pytest.raises(ValueError, match="even"):
        plan_pool(20, 10, 5, 0)
    with pytest.raises(ValueError, match="at least 22"):
        plan_pool(20, 11, 4, 0)


def test_shadow_in_labels_carry_no_information_about_true_membership(game, tmp_path) -> None:
    """Members and non-members are each IN for exactly half the shadows: no point is labelled by its secret."""
    proc = procedure(TensorCache(tmp_path))
    view = game.view(LiRA(LiRA.Params(shadows=6)), game.release(proc), proc)
    plan = plan_pool(len(view.challenge_y), view.train_size, 6, view.pool_seed)
    member_set = set(game.members.tolist())
    truth = np.array([i in member_set for i in game.challenge])
    in_rate = plan.challenge_in.mean(axis=0)
    assert np.all(in_rate[truth] == 0.5) and np.all(in_rate[~truth] == 0.5)
    assert not any(np.array_equal(mask, truth) for mask in plan.challenge_in), "no shadow copies the target"


def test_pool_is_one_training_call_of_k_models_on_the_planned_records(game, tmp_path) -> None:
    proc = procedure(TensorCache(tmp_path))
    view = game.view(LiRA(LiRA.Params(shadows=4)), game.release(proc), proc)
    before = (proc.stats.calls, proc.stats.trained)
    pool = train_pool(view, 4)
    assert (proc.stats.calls - before[0], proc.stats.trained - before[1]) == (1, 4)
    assert pool.models.k == 4
    plan = plan_pool(len(view.challenge_y), view.train_size, 4, view.pool_seed)
    assert np.array_equal(pool.challenge_in, plan.challenge_in)


@pytest.mark.slow
def test_second_attack_in_the_same_game_and_a_rerun_train_nothing(game, tmp_path) -> None:
    first = procedure(TensorCache(tmp_path))
    release = game.release(first)
    game.play(ShadowMIA(ShadowMIA.Params(shadows=6, classifier="logistic")), release, first)
    assert first.stats.trained == 1 + 6
    for attack in (LiRA(LiRA.Params(shadows=6)), ShadowMIA(ShadowMIA.Params(shadows=6, classifier="logistic"))):
        again = procedure(TensorCache(tmp_path))
        game.play(attack, game.release(again), again)
        assert (again.stats.trained, again.stats.cached) == (0, 1 + 6)
    other_size = procedure(TensorCache(tmp_path))
    game.play(LiRA(LiRA.Params(shadows=4)), game.release(other_size), other_size)
    assert other_size.stats.trained == 4, "a pool of another size is another pool"


def test_pool_seed_is_shared_by_attacks_but_differs_between_games(game, tmp_path) -> None:
    proc = procedure(TensorCache(tmp_path))
    release = game.release(proc)
    views = [game.view(a, release, proc) for a in (LiRA(LiRA.Params()), ShadowMIA(ShadowMIA.Params()))]
    assert views[0].pool_seed == views[1].pool_seed and views[0].seed != views[1].seed
    other = MembershipGame(game.spec, game.dataset, seed=6)
    assert other.view(LiRA(LiRA.Params()), release, proc).pool_seed != views[0].pool_seed
