"""The membership game: disjoint seeded splits, a view that holds no secret, threat models enforced."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from arena.attack import Attack, MembershipGuess
from arena.engine.trainer import Recipe
from arena.games.membership import MembershipGame
from arena.games.view import ThreatModelError
from arena.models import Architecture
from arena.plan import load_dataset
from arena.procedure import TrainingProcedure
from arena.scenario import MembershipGameSpec, PluginRef
from arena_plugins.defenses import NonPrivate


@pytest.fixture
def game() -> MembershipGame:
    return MembershipGame(MembershipGameSpec(name="membership", members=60, test=100, population=200),
                          load_dataset(PluginRef(name="digits")), seed=3)


@pytest.fixture
def procedure() -> TrainingProcedure:
    return TrainingProcedure(NonPrivate(NonPrivate.Params()), Architecture("mlp", 64, 10, (16,)),
                             Recipe(epochs=3, lr=0.1, batch_size=30))


class Spy(Attack):
    name = "spy"
    threat_model = frozenset({"query"})
    seen: dict = {}

    def run(self, view) -> MembershipGuess:
        Spy.seen = {name: getattr(view, name) for name in dir(view)}
        scores = -view.model.loss(view.challenge_X, view.challenge_y).numpy()
        return MembershipGuess(scores, scores > np.median(scores))


def test_splits_are_disjoint_sized_and_seeded(game: MembershipGame) -> None:
    parts = [game.members, game.nonmembers, game.test, game.population]
    assert [len(p) for p in parts] == [60, 60, 100, 200]
    assert len(np.unique(np.concatenate(parts))) == 420
    again = MembershipGame(game.spec, game.dataset, seed=3)
    assert np.array_equal(again.challenge, game.challenge)
    other = MembershipGame(game.spec, game.dataset, seed=4)
    assert not np.array_equal(other.members, game.members)


def test_challenge_mixes_members_and_nonmembers(game: MembershipGame) -> None:
    member_set = set(game.members.tolist())
    truth = np.array([i in member_set for i in game.challenge])
    assert truth.sum() == 60
    assert 10 < truth[:60].sum() < 50, "members are shuffled among the challenge points"


def test_view_holds_only_granted_items_and_never_membership(game, procedure) -> None:
    release = game.release(procedure)
    outcome = game.play(Spy(Spy.Params()), release, procedure)
    assert set(Spy.seen) == {"challenge_X", "challenge_y", "n_classes", "train_size", "seed", "pool_seed", "model"}
    for value in Spy.seen.values():
        if isinstance(value, (np.ndarray, torch.Tensor)):
            assert value.dtype != torch.bool and len(value) == 120
    view = game.view(Spy(Spy.Params()), release, procedure)
    with pytest.raises(ThreatModelError, match="population"):
        view.population_X
    with pytest.raises(ThreatModelError, match="training"):
        view.train
    with pytest.raises(AttributeError):
        view.model = None
    assert 0.0 <= outcome.metrics["auc"] <= 1.0
    assert outcome.arrays["is_member"].sum() == 60


def test_release_utility_is_test_accuracy(game, procedure) -> None:
    release = game.release(procedure)
    X = torch.from_numpy(game.dataset.X[game.test])
    y = torch.from_numpy(game.dataset.y[game.test])
    predictions = release.models.predict_proba(X)[0].argmax(-1)
    assert release.utility == pytest.approx((predictions == y).double().mean().item())
    assert release.claim is None
