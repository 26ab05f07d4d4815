"""Shokri et al.'s own threat model for shadow-mia (``data: population``): shadows on halves of the attacker's
population, disjoint from the challenge; the attack model learns from their predictions on population records."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sklearn.dummy import DummyClassifier

import arena_plugins.membership as membership
from arena.contracts.spec import PluginRef
from arena.engine.recipe import Recipe
from arena.games.membership import MembershipGame, MembershipGameSpec
from arena.games.membership.pools import plan_pool
from arena.pipeline.plan import load_dataset
from arena.pipeline.procedure import TrainingProcedure
from arena.pipeline.store import TensorCache
from arena_plugins.defenses import NonPrivate
from arena_plugins.membership import ShadowMIA
from tests.conftest import architecture


@pytest.fixture
def game() -> MembershipGame:
    return MembershipGame(MembershipGameSpec(name="membership", members=50, test=50, population=300),
                          load_dataset(PluginRef(name="digits")), seed=0)


@pytest.fixture
def proc(tmp_path: Path) -> TrainingProcedure:
    return TrainingProcedure(NonPrivate(NonPrivate.Params()), architecture("mlp", (1, 8, 8), 10, hidden=[64]),
                             Recipe(epochs=30, lr=0.1, momentum=0.9, batch_size=25), cache=TensorCache(tmp_path))


class Recorder(DummyClassifier):
    """A stand-in attack model that records the rows and IN/OUT labels it is trained on."""

    rows: list[np.ndarray] = []
    labels: list[np.ndarray] = []

    def fit(self, X, y):
        Recorder.rows.append(np.asarray(X).copy())
        Recorder.labels.append(np.asarray(y).copy())
        return super().fit(X, y)


def test_the_challenge_set_stays_the_default() -> None:
    assert ShadowMIA.Params().data == "challenge"
    with pytest.raises(ValueError):
        ShadowMIA.Params(data="target")


@pytest.mark.slow
def test_shadows_train_on_population_records_only(game, proc, monkeypatch) -> None:
    monkeypatch.setattr(membership, "attack_classifier", lambda kind, seed: Recorder())
    trained: list[np.ndarray] = []
    train_chunks = proc.train_chunks

    def spy(chunks):
        trained.extend(X.reshape(-1, X.shape[-1]).numpy() for X, *_ in chunks)
        return train_chunks(chunks)

    monkeypatch.setattr(proc, "train_chunks", spy)
    release = game.release(proc)
    game.play(ShadowMIA(ShadowMIA.Params(shadows=4, data="population")), release, proc)
    rows = {r.tobytes() for r in np.concatenate(trained)}
    population = {r.tobytes() for r in game.dataset.X[game.population]}
    challenge = {r.tobytes() for r in game.dataset.X[game.challenge]}
    assert rows <= population and not rows & challenge, "disjoint from the challenge, members included"
    assert len(np.concatenate(trained)) == 4 * 50, "four shadows of train_size records"


@pytest.mark.slow
def test_attack_model_learns_each_shadows_own_and_partner_records(game, proc, monkeypatch) -> None:
    monkeypatch.setattr(membership, "attack_classifier", lambda kind, seed: Recorder())
    Recorder.rows, Recorder.labels = [], []
    attack = ShadowMIA(ShadowMIA.Params(shadows=4, data="population", per_class=False))
    release = game.release(proc)
    game.play(attack, release, proc)
    view = game.view(attack, release, proc)
    plan = plan_pool(300, 50, 4, view.pool_seed)
    partner = plan.challenge_in[[1, 0, 3, 2]]
    (labels,) = Recorder.labels
    assert np.array_equal(labels, plan.challenge_in[plan.challenge_in | partner])
    assert labels.sum() == len(labels) - labels.sum() == 4 * 50, "as many IN as OUT rows, like Shokri's"
    assert Recorder.rows[0].shape == (400, 20), "log-odds of 10 classes and the one-hot true label"


def test_too_small_a_population_is_an_error(proc) -> None:
    game = MembershipGame(MembershipGameSpec(name="membership", members=50, test=50, population=80),
                          load_dataset(PluginRef(name="digits")), seed=0)
    with pytest.raises(ValueError, match="at least 100 population records"):
        game.play(ShadowMIA(ShadowMIA.Params(shadows=2, data="population")), game.release(proc), proc)


@pytest.mark.slow
def test_population_shadows_find_members_of_an_overfit_model(game, proc) -> None:
    attack = ShadowMIA(ShadowMIA.Params(shadows=8, data="population", classifier="logistic"))
    assert game.play(attack, game.release(proc), proc).metrics["auc"] > 0.65
