"""The membership game: disjoint seeded splits, a view that holds no secret, threat models enforced."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from arena.contracts.attack import Attack
from arena.contracts.spec import PluginRef
from arena.contracts.view import ThreatModelError
from arena.engine.recipe import Recipe
from arena.games.audit.game import AuditGame
from arena.games.membership import MembershipGame, MembershipGameSpec
from arena.games.membership.guess import MembershipGuess
from arena.pipeline.plan import load_dataset
from arena.pipeline.procedure import TrainingProcedure
from arena_plugins.defenses import NonPrivate
from tests.conftest import architecture


@pytest.fixture
def game() -> MembershipGame:
    return MembershipGame(MembershipGameSpec(name="membership", members=60, test=100, population=200),
                          load_dataset(PluginRef(name="digits")), seed=3)


@pytest.fixture
def procedure() -> TrainingProcedure:
    return TrainingProcedure(NonPrivate(NonPrivate.Params()), architecture("mlp", (1, 8, 8), 10, hidden=[16]),
                             Recipe(epochs=3, lr=0.1, batch_size=30))


class Spy(Attack):
    name = "spy"
    game = "membership"
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


def label_prior_auc(game: MembershipGame) -> float:
    """AUC of an oracle scoring each challenge point by how many members share its label."""
    from sklearn.metrics import roc_auc_score

    labels = game.dataset.y
    member_counts = np.bincount(labels[game.members], minlength=game.dataset.n_classes)
    is_member = np.isin(game.challenge, game.members)
    return roc_auc_score(is_member, member_counts[labels[game.challenge]])


def test_stratified_split_gives_members_and_nonmembers_the_same_label_counts() -> None:
    dataset = load_dataset(PluginRef(name="digits"))
    for seed in range(5):
        game = MembershipGame(MembershipGameSpec(name="membership", members=100), dataset, seed)
        counts = [np.bincount(dataset.y[part], minlength=10) for part in (game.members, game.nonmembers)]
        assert len(game.members) == len(game.nonmembers) == 100
        assert np.abs(counts[0] - counts[1]).max() <= 1
        assert abs(label_prior_auc(game) - 0.5) < 0.03


def test_unstratified_split_lets_the_label_histogram_tell_members_apart() -> None:
    """Why stratifying is the default: on 100 members the label counts alone give an AUC near 0.58."""
    dataset = load_dataset(PluginRef(name="digits"))
    spec = MembershipGameSpec(name="membership", members=100, stratify=False)
    aucs = [label_prior_auc(MembershipGame(spec, dataset, seed)) for seed in range(20)]
    assert np.mean(aucs) > 0.55


def test_view_holds_only_granted_items_and_never_membership(game, procedure) -> None:
    release = game.release(procedure)
    outcome = game.play(Spy(Spy.Params()), release, procedure)
    assert set(Spy.seen) == {"challenge_X", "challenge_y", "n_classes", "input_shape", "train_size", "seed",
                             "pool_seed", "model"}
    assert Spy.seen["input_shape"] == (1, 8, 8)
    for value in Spy.seen.values():
        if isinstance(value, (np.ndarray, torch.Tensor)):
            assert value.dtype != torch.bool and len(value) == 120
    view = game.view(Spy(Spy.Params()), release, procedure)
    with pytest.raises(ThreatModelError, match="population"):
        view.population_X  # noqa: B018 - the view refuses it
    with pytest.raises(ThreatModelError, match="training"):
        view.train  # noqa: B018 - the view refuses it
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


def test_play_is_score_of_the_attacks_run_on_the_typed_view(game: MembershipGame, procedure: TrainingProcedure) -> None:
    """``view`` and ``score`` split ``play`` (the attack may run elsewhere in between) with the same outcome."""
    from arena import MembershipView

    release = game.release(procedure)
    attack = Spy(Spy.Params())
    view = game.view(attack, release, procedure)
    assert isinstance(view, MembershipView)
    apart = game.score(attack, attack.run(view))
    together = game.play(attack, release, procedure)
    assert apart.metrics == together.metrics
    assert all(np.array_equal(apart.arrays[k], together.arrays[k]) for k in together.arrays)
    with pytest.raises(TypeError, match="not a MembershipGuess"):
        game.score(attack, object())


def test_score_records_the_operating_point_of_every_tpr_it_reports(game: MembershipGame) -> None:
    """Each TPR@FPR that is a number carries its operating point; applied to the saved scores it gives the counts."""
    n = len(game.challenge)
    scores = np.random.default_rng(0).normal(size=n)
    outcome = game.score(Spy(Spy.Params()), MembershipGuess(scores, scores > 0))
    reported = {k for k, v in outcome.metrics.items() if k.startswith("tpr@") and v is not None}
    assert reported == {"tpr@10%fpr"} and set(outcome.operating_points) == reported  # 60 non-members: 10 % only
    point = outcome.operating_points["tpr@10%fpr"]
    member = outcome.arrays["is_member"].astype(bool)
    called = outcome.arrays["scores"] >= point["threshold"]
    assert (point["members"], point["nonmembers"]) == (60, 60)
    assert int((called & ~member).sum()) == point["false_positives"] <= 6
    assert int((called & member).sum()) / 60 == outcome.metrics["tpr@10%fpr"]


class _Trainer(Spy):
    name = "trainer"
    threat_model = frozenset({"query", "training"})


class _Spy(NonPrivate):
    """Non-private training that needs a reference set and records what the procedure hands it."""

    name = "reference-spy"
    needs_reference = True
    tasks: list = []

    def fit(self, task):
        _Spy.tasks.append(task)
        return super().fit(task)


def test_the_defenders_reference_set_is_outside_the_challenge_test_and_population(game: MembershipGame) -> None:
    """The release trains on every member; its reference set is ``reference`` records in none of the challenge,
    the test set and the attacker's population; the attacker's ``train`` gets its own population instead."""
    arch = architecture("mlp", game.dataset.shape, game.dataset.n_classes, hidden=[8])
    procedure = TrainingProcedure(_Spy(_Spy.Params()), arch, Recipe(epochs=1, lr=0.1, batch_size=32))
    _Spy.tasks.clear()
    game.release(procedure)
    assert len(game.reference) == game.spec.members  # default: as many as members, from the records left over
    others = np.concatenate([game.challenge, game.test, game.population])
    assert not np.isin(game.reference, others).any()
    (task,) = _Spy.tasks
    X, _ = game.records(game.members)
    Xr, yr = game.records(game.reference)
    torch.testing.assert_close(task.X[0], X.float())  # all n members train
    torch.testing.assert_close(task.reference_X[0], Xr.float())
    assert torch.equal(task.reference_y[0], yr)
    view_train = game.view(_Trainer(_Trainer.Params()), game.release(procedure), procedure).train
    pX, _ = game.records(game.population)
    assert view_train.reference_X is not None and torch.equal(view_train.reference_X, pX)
    assert procedure.reference_X is None  # the game's own procedure is left as it was


def test_a_defense_needing_a_reference_set_is_refused_when_the_game_leaves_none() -> None:
    digits = load_dataset(PluginRef(name="digits"))
    arch = architecture("mlp", digits.shape, digits.n_classes, hidden=[8])
    spy = _Spy(_Spy.Params())
    rest = MembershipGameSpec(name="membership", members=60, test=100)  # the population takes every other record
    (problem,) = MembershipGame.defense_problems(rest, digits, arch, spy)
    assert "needs a reference set" in problem[1] and "game.reference" in problem[1]
    assert MembershipGame.defense_problems(rest, digits, arch, NonPrivate(NonPrivate.Params())) == []
    given = MembershipGameSpec(name="membership", members=60, test=100, reference=50)
    assert MembershipGame.defense_problems(given, digits, arch, spy) == []
    dealt = MembershipGame(given, digits, seed=1)
    assert len(dealt.reference) == 50 and len(dealt.population) == digits.n - 220 - 50
    assert not np.isin(dealt.reference, np.concatenate([dealt.challenge, dealt.test, dealt.population])).any()
    (field, message) = AuditGame.defense_problems(given, digits, arch, spy)[0]
    assert field == "name" and "does not supply" in message


@pytest.mark.parametrize("references", [10**4000, -1, True, 2.5, "9"])
def test_a_guess_declaring_an_unbounded_or_ill_typed_number_of_references_is_refused(game: MembershipGame,
                                                                                     references) -> None:
    """``references = 10**4000`` would be stored and overflow every reader of the row (issue 40, D): the game
    refuses it as the attack's error; a bounded whole number is recorded as it is."""
    n = len(game.challenge)
    scores = np.random.default_rng(0).normal(size=n)
    with pytest.raises(ValueError, match="attack 'spy' returned references = .*whole number in \\[0, 2\\^53\\]"):
        game.score(Spy(Spy.Params()), MembershipGuess(scores, scores > 0, references))
    outcome = game.score(Spy(Spy.Params()), MembershipGuess(scores, scores > 0, np.int64(2**53)))
    assert outcome.metrics["reference_points"] == 2**53 and type(outcome.metrics["reference_points"]) is int
