"""The reconstruction game: disjoint splits, one batched release, a view without targets, oracle-based scoring."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
import torch

from arena.contracts.attack import Attack
from arena.contracts.dataset import Dataset
from arena.contracts.view import ThreatModelError
from arena.engine.recipe import Recipe
from arena.games.reconstruction import (
    ReconstructionGame,
    ReconstructionGameSpec,
    kappa_estimate,
    nearest_neighbours,
    prior_mass,
    reconstruction_metrics,
)
from arena.games.reconstruction.grids import GRID_FILE
from arena.games.reconstruction.guess import ReconstructionGuess
from arena.pipeline.procedure import TrainingProcedure
from arena_plugins.defenses import NonPrivate
from tests.conftest import architecture


@pytest.fixture
def dataset() -> Dataset:
    """Distinct rows (no duplicates), so 'this row is a target' is decidable by value."""
    rng = np.random.default_rng(0)
    X = rng.random((120, 5)).astype(np.float32)
    return Dataset("toy", X, rng.integers(0, 3, 120), 3, "tabular", (5,))


def spec(init: str = "known") -> ReconstructionGameSpec:
    return ReconstructionGameSpec(name="reconstruction", fixed=30, targets=8, shadow_targets=40, test=20, init=init)


@pytest.fixture
def procedure() -> TrainingProcedure:
    return TrainingProcedure(NonPrivate(NonPrivate.Params()), architecture("logreg", 5, 3, l2=0.1),
                             Recipe(epochs=1, lr=0.1))


class Spy(Attack):
    """Records everything its view holds and answers with the first fixed record for every target."""

    name = "spy"
    game = "reconstruction"
    threat_model = frozenset({"parameters", "fixed-set", "training", "prior"})
    seen: ClassVar[dict] = {}

    def run(self, view) -> ReconstructionGuess:
        Spy.seen = {name: getattr(view, name) for name in dir(view)}
        return ReconstructionGuess(view.fixed_X[:1].expand(view.n_targets, -1).numpy())


def test_hand_made_oracle_success_and_label_accuracy() -> None:
    targets = np.array([[0.0, 0.0], [1.0, 1.0], [0.5, 0.5]])
    pool = np.array([[0.0, 0.2], [2.0, 2.0], [0.5, 0.5]])
    idx, oracle = nearest_neighbours(targets, pool)
    assert idx.tolist() == [0, 2, 2]
    np.testing.assert_allclose(oracle, [0.02, 0.25, 0.0])
    records = np.array([[0.1, 0.1], [1.0, 1.0], [0.5, 0.5]])  # 0.01 < 0.02: beats; 0 < 0.25: beats; 0 < 0: not
    metrics, notes = reconstruction_metrics(targets, records, oracle, np.array([0, 1, 2]), np.array([0, 1, 1]))
    assert metrics["success_rate"] == pytest.approx(2 / 3)
    assert metrics["mse_mean"] == pytest.approx(0.01 / 3)
    assert metrics["mse_median"] == 0.0
    assert metrics["oracle_mse_mean"] == pytest.approx(0.27 / 3)
    assert metrics["label_accuracy"] == pytest.approx(2 / 3)
    assert metrics["n_targets"] == 3 and notes == []
    unlabelled, notes = reconstruction_metrics(targets, records, oracle, np.array([0, 1, 2]), None)
    assert unlabelled["label_accuracy"] is None and "label_accuracy" in notes[0]


def test_prior_mass_is_the_best_single_guess_share() -> None:
    targets = np.array([[0.0], [0.1], [1.0]])
    oracle = np.array([0.05, 0.05, 0.001])
    # guess 0.05 is within MSE 0.0025 of the first two targets (both radii 0.05) and far from the third
    assert prior_mass(targets, oracle, np.array([[0.05], [1.0]])) == pytest.approx(2 / 3)
    assert prior_mass(targets, oracle, np.array([[5.0]])) == 0.0


def test_splits_are_disjoint_and_seeded(dataset: Dataset) -> None:
    game = ReconstructionGame(spec(), dataset, seed=1)
    parts = [game.fixed, game.targets, game.shadow, game.test]
    assert [len(p) for p in parts] == [30, 8, 40, 20]
    assert len(np.unique(np.concatenate(parts))) == 98
    assert np.array_equal(ReconstructionGame(spec(), dataset, seed=1).targets, game.targets)
    assert not np.array_equal(ReconstructionGame(spec(), dataset, seed=2).targets, game.targets)
    assert ReconstructionGame.train_size(spec()) == 31


def test_release_is_one_batched_call_on_fixed_set_plus_each_target(dataset, procedure) -> None:
    game = ReconstructionGame(spec(), dataset, seed=1)
    release = game.release(procedure)
    assert procedure.stats.calls == 1 and procedure.stats.trained == 8 and release.models.k == 8
    assert 0.0 <= release.utility <= 1.0
    # model k is the optimum on D⁻ ∪ {z_k}: refitting model 3 alone gives the same parameters
    X = torch.from_numpy(np.concatenate([dataset.X[game.fixed], dataset.X[game.targets[3:4]]]))[None]
    y = torch.from_numpy(np.concatenate([dataset.y[game.fixed], dataset.y[game.targets[3:4]]]))[None]
    alone, _ = procedure(X, y, [0], [0])
    for name, t in alone.state.items():
        torch.testing.assert_close(t[0], release.models.state[name][3])


def test_view_grants_declared_items_and_never_a_target(dataset, procedure) -> None:
    game = ReconstructionGame(spec(), dataset, seed=1)
    release = game.release(procedure)
    outcome = game.play(Spy(Spy.Params()), release, procedure)
    seen = Spy.seen
    assert {"parameters", "fixed_X", "fixed_y", "train", "init_seed", "shadow_X", "shadow_y", "n_targets", "l2",
            "n_classes", "kind", "shape", "seed"} <= set(seen)
    assert seen["l2"] == 0.1 and seen["n_targets"] == 8 and seen["shape"] == (5,)
    targets = dataset.X[game.targets]
    for name, value in seen.items():
        if isinstance(value, torch.Tensor) and value.ndim == 2:
            rows = value.numpy()
            assert not (rows[:, None, :] == targets[None]).all(-1).any(), f"view item {name!r} holds a target"
    assert outcome.metrics["n_targets"] == 8

    class ParametersOnly(Spy):
        threat_model = frozenset({"parameters"})

    view = game.view(ParametersOnly(ParametersOnly.Params()), release, procedure)
    for withheld in ("fixed_X", "shadow_X", "train", "init_seed"):
        with pytest.raises(ThreatModelError):
            getattr(view, withheld)


def test_known_init_is_shared_and_disclosed_hidden_init_is_secret(dataset, procedure) -> None:
    known = ReconstructionGame(spec("known"), dataset, seed=1)
    assert known.init_seed is not None and set(known.init_seeds) == {known.init_seed}
    hidden = ReconstructionGame(spec("hidden"), dataset, seed=1)
    assert hidden.init_seed is None and len(set(hidden.init_seeds)) == 8
    release = hidden.release(procedure)
    hidden.play(Spy(Spy.Params()), release, procedure)
    assert Spy.seen["init_seed"] is None


@pytest.mark.slow
def test_outcome_arrays_and_grid(dataset, procedure, tmp_path) -> None:
    game = ReconstructionGame(spec(), dataset, seed=1)
    outcome = game.play(Spy(Spy.Params()), game.release(procedure), procedure)
    a = outcome.arrays
    np.testing.assert_array_equal(a["targets"], dataset.X[game.targets])
    pool = dataset.X[np.concatenate([game.fixed, game.shadow])]
    assert all((pool == row).all(-1).any() for row in a["nearest_neighbours"])
    np.testing.assert_allclose(a["oracle_mse"], ((a["targets"] - a["nearest_neighbours"]) ** 2).mean(1), rtol=1e-6)
    assert outcome.metrics["success_rate"] == float((a["mse"] < a["oracle_mse"]).mean())
    game.save_artifacts(outcome, tmp_path / "art")
    assert (tmp_path / "art" / GRID_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("records, message", [(np.zeros((8, 4)), "shape"), (np.full((8, 5), np.nan), "non-finite")])
def test_malformed_guesses_fail_loudly(dataset, procedure, records, message) -> None:
    class Bad(Spy):
        def run(self, view) -> ReconstructionGuess:
            return ReconstructionGuess(records)

    game = ReconstructionGame(spec(), dataset, seed=1)
    with pytest.raises(ValueError, match=message):
        game.play(Bad(Bad.Params()), game.release(procedure), procedure)


def test_kappa_estimate_finds_midpoints_and_mean_shift_centres() -> None:
    """Three targets on a triangle, each radius 0.06 (MSE 0.0036) with pairwise distances 0.1: no target covers
    another, a midpoint covers two (distance 0.05), the centroid all three (distance 0.0577)."""
    targets = np.array([[0.0, 0.0], [0.1, 0.0], [0.05, 0.1 * np.sqrt(3) / 2]]) * np.sqrt(2)  # MSE = dist²/2
    oracle = np.full(3, 0.0036)
    far_pool = np.array([[5.0, 5.0]])
    assert prior_mass(targets, oracle, np.concatenate([targets, far_pool])) == pytest.approx(1 / 3)
    assert kappa_estimate(targets, oracle, far_pool, shift_steps=0)[0] == pytest.approx(2 / 3)
    kappa, searched = kappa_estimate(targets, oracle, far_pool, shift_steps=2)
    assert kappa == pytest.approx(1.0) and searched == 3 * (3 + 1 + 3)


def discrete_spec(candidates: int = 5, targets: int = 8) -> ReconstructionGameSpec:
    return ReconstructionGameSpec(name="reconstruction", fixed=30, targets=targets, shadow_targets=40, test=20,
                                  prior="discrete", candidates=candidates)


def test_discrete_prior_draws_each_target_from_distinct_candidates(dataset: Dataset) -> None:
    game = ReconstructionGame(discrete_spec(), dataset, seed=1)
    assert len(game.candidates) == 5 and len(np.unique(dataset.X[game.candidates], axis=0)) == 5
    parts = [game.fixed, game.candidates, game.shadow, game.test]
    assert len(np.unique(np.concatenate(parts))) == sum(len(p) for p in parts)
    assert np.array_equal(game.targets, game.candidates[game.target_index])
    # uniform draws: over many seeds each candidate is the target about 1/5 of the time
    draws = np.concatenate([ReconstructionGame(discrete_spec(targets=50), dataset, seed=s).target_index
                            for s in range(40)])
    shares = np.bincount(draws, minlength=5) / len(draws)
    assert np.abs(shares - 0.2).max() < 0.04  # 2000 draws: standard error 0.009


def test_discrete_prior_view_shows_candidates_never_the_index(dataset, procedure) -> None:
    game = ReconstructionGame(discrete_spec(), dataset, seed=1)
    game.play(Spy(Spy.Params()), game.release(procedure), procedure)
    seen = Spy.seen
    np.testing.assert_array_equal(seen["candidates_X"].numpy(), dataset.X[game.candidates])
    assert seen["prior_kind"] == "discrete" and seen["n_candidates"] == 5
    index = game.target_index
    assert not any(isinstance(v, np.ndarray | torch.Tensor) and np.array_equal(np.asarray(v), index)
                   for v in seen.values())
    continuous = ReconstructionGame(spec(), dataset, seed=1)
    continuous.play(Spy(Spy.Params()), continuous.release(procedure), procedure)
    assert Spy.seen["candidates_X"] is None and Spy.seen["prior_kind"] == "continuous"


def test_discrete_prior_success_is_the_nearest_candidate_and_kappa_is_exact(dataset, procedure) -> None:
    class Fixed(Spy):
        """Ignores the model: always a point nearest to candidate 2 (not the candidate itself)."""

        def run(self, view) -> ReconstructionGuess:
            return ReconstructionGuess(np.repeat(view.candidates_X[2:3].numpy() + 1e-3, view.n_targets, 0))

    game = ReconstructionGame(discrete_spec(targets=8), dataset, seed=1)
    outcome = game.play(Fixed(Fixed.Params()), game.release(procedure), procedure)
    assert outcome.metrics["success_rate"] == float((game.target_index == 2).mean())
    assert outcome.metrics["kappa"] == 0.2 and outcome.metrics["kappa_exact"] is True
    assert outcome.metrics["n_candidates"] == 5


def test_continuous_kappa_is_labelled_an_estimate(dataset, procedure) -> None:
    game = ReconstructionGame(spec(), dataset, seed=1)
    outcome = game.play(Spy(Spy.Params()), game.release(procedure), procedure)
    assert outcome.metrics["kappa_exact"] is False and 1 / 8 <= outcome.metrics["kappa"] <= 1.0
    assert any("lower estimate of the supremum" in note for note in outcome.notes)


@pytest.mark.parametrize("changes, field, message", [
    ({"prior": "discrete"}, "candidates", "needs candidates"),
    ({"prior": "discrete", "candidates": 1}, "candidates", "needs candidates"),
    ({"candidates": 5}, "candidates", "prior 'discrete' only"),
    ({"prior": "discrete", "candidates": 60}, "", "needs 150 points"),
])
def test_prior_options_are_checked_before_any_work(dataset, changes, field, message) -> None:
    bad = ReconstructionGameSpec(name="reconstruction", fixed=30, targets=8, shadow_targets=40, test=20, **changes)
    ((got_field, got_message),) = ReconstructionGame.problems(bad, dataset)
    assert got_field == field and message in got_message
    assert ReconstructionGame.problems(discrete_spec(), dataset) == []
