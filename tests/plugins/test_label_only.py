"""Label-only membership inference (Choquette-Choo et al. 2021): the view holds predicted labels and nothing that
carries a probability; the perturbations are the paper's; the attack finds members of an overfit model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from arena.contracts.release import LabelOnly
from arena.contracts.spec import PluginRef
from arena.contracts.view import ThreatModelError
from arena.engine.recipe import Recipe
from arena.games.membership import MembershipGame, MembershipGameSpec
from arena.pipeline.plan import load_dataset
from arena.pipeline.procedure import TrainingProcedure
from arena.pipeline.store import TensorCache
from arena_plugins.defenses import NonPrivate
from arena_plugins.label_only import LabelOnlyMIA, perturbations, shifts, translate
from tests.conftest import architecture


@pytest.fixture
def game() -> MembershipGame:
    return MembershipGame(MembershipGameSpec(name="membership", members=100, test=100, population=400),
                          load_dataset(PluginRef(name="digits")), seed=0)


@pytest.fixture
def overfit(tmp_path: Path) -> TrainingProcedure:
    return TrainingProcedure(NonPrivate(NonPrivate.Params()), architecture("mlp", (1, 8, 8), 10, hidden=[128]),
                             Recipe(epochs=60, lr=0.1, momentum=0.9, batch_size=25), cache=TensorCache(tmp_path))


@pytest.mark.slow
def test_the_view_answers_labels_and_refuses_every_probability(game, overfit) -> None:
    release = game.release(overfit)
    view = game.view(LabelOnlyMIA(LabelOnlyMIA.Params()), release, overfit)
    labels = view.labels_model.predict(view.challenge_X)
    assert labels.dtype == torch.int64 and labels.shape == (200,)
    assert torch.equal(labels, release.models.logits(view.challenge_X)[0].argmax(-1))
    for name in ("model", "parameters", "train"):  # the black box, the weights, the training procedure
        with pytest.raises(ThreatModelError):
            getattr(view, name)
    for name in ("predict_proba", "log_proba", "loss", "logits", "_models", "_predict", "models", "__dict__",
                 "__slots__", "__getstate__", "__reduce_ex__"):
        with pytest.raises(ThreatModelError):
            getattr(view.labels_model, name)
    with pytest.raises(AttributeError):
        view.labels_model._predict = None
    assert set(dir(view)) == {"challenge_X", "challenge_y", "input_shape", "labels_model", "n_classes",
                              "pool_seed", "population_X", "population_y", "seed", "train_size"}


@pytest.mark.slow
def test_a_label_only_interface_wraps_exactly_one_model(game, overfit) -> None:
    release = game.release(overfit)
    LabelOnly(release.models)
    with pytest.raises(ValueError, match="exactly one"):
        LabelOnly(type(release.models)(release.models.arch,
                                       {k: torch.cat([v, v]) for k, v in release.models.state.items()}))


def test_translations_move_pixels_and_fill_with_zeros() -> None:
    image = torch.arange(1.0, 10.0).reshape(1, 1, 3, 3)
    assert translate(image, 1, 0)[0, 0].tolist() == [[0, 0, 0], [1, 2, 3], [4, 5, 6]]
    assert translate(image, 0, -1)[0, 0].tolist() == [[2, 3, 0], [5, 6, 0], [8, 9, 0]]
    assert torch.equal(translate(image, 0, 0), image)
    assert shifts(1) == [(0, 0), (-1, 0), (0, -1), (0, 1), (1, 0)]
    assert shifts(0) == [(0, 0)]


@pytest.mark.parametrize("d", [1, 2, 3, 5])
def test_the_augmentation_set_is_the_record_and_its_translations_at_l1_distance_exactly_d(d: int) -> None:
    """Choquette-Choo et al.'s set for translation d: the record and the 4d shifts with |i| + |j| = d, none
    closer (a shift at distance < d is another d's query), none repeated."""
    got = shifts(d)
    assert got[0] == (0, 0) and len(got) == 4 * d + 1 == len(set(got))
    assert all(abs(i) + abs(j) == d for i, j in got[1:])
    assert set(got[1:]) == {(i, j) for i in range(-d, d + 1) for j in range(-d, d + 1) if abs(i) + abs(j) == d}
    X = torch.rand(2, 1 * 8 * 8, generator=torch.Generator().manual_seed(d))
    queries = perturbations(X, (1, 8, 8), LabelOnlyMIA.Params(shift=d, draws=0), seed=0)
    assert queries.shape == (4 * d + 1, 2, 64)
    assert torch.equal(queries[1], translate(X.reshape(2, 1, 8, 8), *got[1]).reshape(2, -1))


def test_queries_are_the_record_its_translations_flips_and_noisy_copies() -> None:
    X = torch.rand(4, 2 * 3 * 3, generator=torch.Generator().manual_seed(0))
    params = LabelOnlyMIA.Params(shift=1, flip=True, sigma=0.5, draws=3)
    queries = perturbations(X, (2, 3, 3), params, seed=7)
    assert queries.shape == (2 * 5 + 3, 4, 18)
    assert torch.equal(queries[0], X) and torch.equal(queries[5], X.reshape(4, 2, 3, 3).flip(-1).reshape(4, -1))
    noise = queries[10:] - X
    assert 0.3 < noise.std() < 0.7 and not torch.equal(noise[0], noise[1])
    assert torch.equal(perturbations(X, (2, 3, 3), params, seed=7), queries), "seeded"
    tabular = perturbations(X, (18,), params, seed=7)
    assert tabular.shape == (1 + 3, 4, 18) and torch.equal(tabular[0], X), "no translation of a table row"


@pytest.mark.slow
def test_label_only_attack_finds_members_of_an_overfit_model(game, overfit) -> None:
    outcome = game.play(LabelOnlyMIA(LabelOnlyMIA.Params(sigma=0.3, draws=16)), game.release(overfit), overfit)
    assert outcome.metrics["auc"] > 0.6
    scores = outcome.arrays["scores"]
    assert np.all((scores >= 0) & (scores <= 1)), "fractions of correct answers"
