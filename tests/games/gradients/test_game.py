"""The gradients game: disjoint secret batches, a view that never holds them, the analytic and informed attacks
exact where the model allows it, iDLG's labels exact at B = 1, the defenses acting on the update."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
import torch

from arena.contracts.attack import Attack
from arena.contracts.dataset import Dataset
from arena.contracts.view import ThreatModelError
from arena.engine.recipe import Recipe
from arena.games.gradients import GradientsGame, GradientsGameSpec, GradientsGuess
from arena.games.gradients.update import client_update
from arena.pipeline.procedure import TrainingProcedure
from arena_plugins.defenses import NonPrivate
from arena_plugins.gradient_attacks import IDLG, AnalyticFirstLayer, InformedExact
from arena_plugins.gradient_defenses import ClientDPSGD, GradientPruning, SecureAggregation
from tests.conftest import architecture

SHAPE = (1, 8, 8)


@pytest.fixture(scope="module")
def dataset() -> Dataset:
    """Distinct 8×8 images in [0, 1], 3 classes."""
    rng = np.random.default_rng(0)
    X = rng.random((260, 64)).astype(np.float32)
    return Dataset("toy", X, rng.integers(0, 3, 260), 3, "image", SHAPE)


def spec(**kw: object) -> GradientsGameSpec:
    return GradientsGameSpec(name="gradients", **{"batch_size": 1, "batches": 6, "pretrain": 60, "population": 40,
                                                  "test": 40, **kw})


def procedure(defense=None) -> TrainingProcedure:
    return TrainingProcedure(defense or NonPrivate(NonPrivate.Params()),
                             architecture("mlp", SHAPE, 3, hidden=[32], activation="relu"),
                             Recipe(epochs=2, lr=0.1, batch_size=16))


def play(dataset: Dataset, attack: Attack, defense=None, **kw: object):
    game = GradientsGame(spec(**kw), dataset, 7)
    proc = procedure(defense)
    return game, game.play(attack, game.release(proc), proc)


class Spy(Attack):
    """Keeps its view's items and answers with zeros."""

    name = "spy"
    game = "gradients"
    threat_model = frozenset({"parameters", "population"})
    seen: ClassVar[list[dict]] = []

    def run(self, view) -> GradientsGuess:
        Spy.seen.append({name: getattr(view, name) for name in dir(view)})
        return GradientsGuess(np.zeros((view.n_records, view.n_features)))


def tensors(items: dict) -> list[np.ndarray]:
    out = []
    for value in items.values():
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            out.append(value.reshape(len(value), -1).numpy() if value.ndim > 1 else value.numpy()[None])
    return out


def test_batches_are_disjoint_from_each_other_and_from_what_the_attacker_holds(dataset: Dataset) -> None:
    game = GradientsGame(spec(batch_size=4, batches=5), dataset, 3)
    batches = game.batches.reshape(-1)
    assert len(set(batches.tolist())) == 20
    for part in (game.pretrain, game.test, game.population, game.others):
        assert not set(part.tolist()) & set(batches.tolist())
    assert game.target_pos.min() >= 0 and game.target_pos.max() < 4


def test_the_view_holds_no_record_of_any_client_batch(dataset: Dataset) -> None:
    Spy.seen = []
    game, outcome = play(dataset, Spy(Spy.Params()), batch_size=2)
    secret = {dataset.X[i].tobytes() for i in game.batches.reshape(-1)}
    assert len(Spy.seen) == game.spec.batches
    for items in Spy.seen:
        assert items["labels"] is None, "labels hidden unless the game says known"
        for array in tensors(items):
            rows = array.reshape(-1, 64) if array.size % 64 == 0 else array
            assert not any(r.astype(np.float32).tobytes() in secret for r in rows)
        assert "known_X" not in items and "known_y" not in items, "fixed-set was not declared"
    with pytest.raises(ThreatModelError, match="fixed-set"):
        _ = _view(game).known_X
    assert outcome.metrics["target_success_rate"] == 0.0


def _view(game: GradientsGame):
    proc = procedure()
    return game.view(Spy(Spy.Params()), game.release(proc), proc)


def test_the_informed_view_holds_every_record_of_the_update_but_the_target(dataset: Dataset) -> None:
    class Informed(Spy):
        threat_model = frozenset({"parameters", "fixed-set"})

    game = GradientsGame(spec(batch_size=4, batches=3), dataset, 5)
    proc = procedure()
    views = game.view_groups(Informed(Informed.Params()), game.release(proc), proc)[0]
    for j, view in enumerate(views):
        batch = game.batches[j]
        expected = {dataset.X[i].tobytes() for k, i in enumerate(batch) if k != game.target_pos[j]}
        assert {r.tobytes() for r in view.known_X.numpy()} == expected


def test_analytic_recovers_the_record_to_float_precision_at_batch_size_one(dataset: Dataset) -> None:
    _, outcome = play(dataset, AnalyticFirstLayer(AnalyticFirstLayer.Params()))
    a = outcome.arrays
    np.testing.assert_allclose(a["reconstructions"], a["records"], atol=1e-5)
    assert outcome.metrics["target_success_rate"] == 1.0
    assert outcome.metrics["target_psnr_mean"] > 90, outcome.metrics
    assert outcome.metrics["ssim_mean"] == pytest.approx(1.0)


def test_idlg_recovers_every_label_at_batch_size_one(dataset: Dataset) -> None:
    attack = IDLG(IDLG.Params(iterations=1, restarts=1))
    _, outcome = play(dataset, attack, batches=12)
    assert outcome.metrics["target_label_accuracy"] == 1.0


def test_idlg_with_the_papers_lbfgs_rebuilds_records_at_batch_size_one_far_closer_than_adam(dataset: Dataset) -> None:
    """L-BFGS (the default, as Zhu et al. and Zhao et al. optimise) against Adam at the same budget and start."""
    lbfgs = IDLG(IDLG.Params(iterations=40, restarts=1))
    assert lbfgs.params.optimiser == "lbfgs"
    _, outcome = play(dataset, lbfgs, batches=2)
    adam = IDLG(IDLG.Params(iterations=40, restarts=1, optimiser="adam", lr=0.1))
    _, adam_outcome = play(dataset, adam, batches=2)
    assert outcome.metrics["target_success_rate"] == 1.0, outcome.metrics
    assert adam_outcome.metrics["target_psnr_mean"] < outcome.metrics["target_psnr_mean"] - 10, adam_outcome.metrics


def test_the_informed_adversary_solves_the_target_exactly_at_batch_size_four(dataset: Dataset) -> None:
    _, outcome = play(dataset, InformedExact(InformedExact.Params()), batch_size=4)
    a = outcome.arrays
    np.testing.assert_allclose(a["reconstructions"], a["records"], atol=1e-4)
    assert outcome.metrics["target_success_rate"] == 1.0 and outcome.metrics["target_label_accuracy"] == 1.0


def test_client_dpsgd_claims_its_epsilon_and_noises_the_update(dataset: Dataset) -> None:
    defense = ClientDPSGD(ClientDPSGD.Params(epsilons=[2.0], delta=1e-5, clip=1.0))
    game = GradientsGame(spec(local_steps=3), dataset, 1)
    claim = game.release(procedure(defense)).claim
    assert claim is not None and claim.epsilon <= 2.0 and claim.steps == 3 and claim.sample_rate == 1.0
    assert claim.noise_multiplier and claim.noise_multiplier > 1
    _, outcome = play(dataset, AnalyticFirstLayer(AnalyticFirstLayer.Params()), defense)
    assert outcome.metrics["target_psnr_mean"] < 40, "the noise stops the exact recovery"


def test_pruning_zeroes_the_share_of_the_update_it_is_asked_to() -> None:
    module = architecture("mlp", SHAPE, 3, hidden=[16]).build().train()
    X, y = torch.rand(2, *SHAPE), torch.tensor([0, 2])
    defense = GradientPruning(GradientPruning.Params(rates=[0.9]))
    raw = client_update(module, X, y, steps=1, lr=0.1, defense=NonPrivate(NonPrivate.Params()),
                        generator=torch.Generator())
    pruned = client_update(module, X, y, steps=1, lr=0.1, defense=defense, generator=torch.Generator())
    flat_raw = torch.cat([t.reshape(-1) for t in raw.values()])
    flat = torch.cat([t.reshape(-1) for t in pruned.values()])
    kept = flat != 0
    assert int(kept.sum()) == int(np.ceil(0.1 * flat.numel()))
    assert torch.equal(flat[kept], flat_raw[kept])
    assert flat_raw[~kept].abs().max() <= flat_raw[kept].abs().min()


def test_secure_aggregation_sums_the_clients_and_asks_for_all_their_records(dataset: Dataset) -> None:
    defense = SecureAggregation(SecureAggregation.Params(clients=3))
    Spy.seen = []
    game, _ = play(dataset, Spy(Spy.Params()), defense, batch_size=2, batches=2)
    assert Spy.seen[0]["n_records"] == 6 and Spy.seen[0]["clients"] == 3
    module = game._views["spy"][0].model.module(0, train=True)
    total = {}
    for c in range(3):
        rows = game.update_records(0, 3)[2 * c : 2 * c + 2]
        X, y = game.records(rows)
        u = client_update(module, X.reshape(-1, *SHAPE), y, steps=1, lr=0.1, defense=defense,
                          generator=torch.Generator())
        total = {k: total.get(k, 0) + v for k, v in u.items()}
    for k, v in Spy.seen[0]["update"].items():
        torch.testing.assert_close(v, total[k])


def test_a_guess_of_the_wrong_shape_is_an_error_naming_the_attack(dataset: Dataset) -> None:
    class Short(Spy):
        name = "short"

        def run(self, view) -> GradientsGuess:
            return GradientsGuess(np.zeros((view.n_records + 1, view.n_features)))

    with pytest.raises(ValueError, match="'short' returned records of shape"):
        play(dataset, Short(Short.Params()))
