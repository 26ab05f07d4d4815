"""Reconstruction attacks: the GLM closed form is exact and skips non-GLMs; reconn learns; a tiny tournament."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from arena.contracts.dataset import Dataset
from arena.contracts.spec import EntryRef, PluginRef, Track, TrainingSpec
from arena.engine.newton import design, fit_logreg
from arena.engine.output_perturbation import clip_rows, fit_penalised
from arena.engine.recipe import Recipe
from arena.games.reconstruction import ReconstructionGame, ReconstructionGameSpec
from arena.games.reconstruction.grids import GRID_FILE
from arena.pipeline import tournament
from arena.pipeline.execute import play_matchup
from arena.pipeline.plan import plan
from arena.pipeline.procedure import TrainingProcedure
from arena.pipeline.store import SECRET_ENV, RunStore
from arena_plugins import defenses
from arena_plugins.defenses import NonPrivate, OutputPerturbation
from arena_plugins.reconstruction import (
    GLMReconstruction,
    ReconNN,
    candidate_residuals,
    glm_closed_form,
    training_objective,
)
from tests.conftest import architecture, write_scenario


@pytest.mark.parametrize("n_classes, l2", [(2, 0.0), (2, 1e-2), (4, 0.0), (4, 1e-2)])
def test_closed_form_recovers_hand_made_targets_exactly(n_classes: int, l2: float) -> None:
    g = torch.Generator().manual_seed(n_classes)
    fixed_X = torch.rand(40, 3, generator=g, dtype=torch.float64)
    fixed_y = torch.randint(0, n_classes, (40,), generator=g)
    targets = torch.tensor([[0.25, 0.5, 0.75], [1.0, 0.0, 0.5], [0.1, 0.9, 0.3]], dtype=torch.float64)
    labels = torch.tensor([1, 0, n_classes - 1])
    X = torch.cat([fixed_X.expand(3, -1, -1), targets[:, None]], 1)
    y = torch.cat([fixed_y.expand(3, -1), labels[:, None]], 1)
    params = fit_logreg(X, y, n_classes, l2)
    records, found = glm_closed_form(params, fixed_X, fixed_y, l2)
    torch.testing.assert_close(records, targets, rtol=0, atol=1e-7)
    assert found.tolist() == labels.tolist()


def test_closed_form_uses_the_papers_scaling_by_n() -> None:
    """With L2 the D⁻ sum must be scaled by n = |D⁻| + 1; using the wrong l2 leaves a visible error."""
    g = torch.Generator().manual_seed(0)
    fixed_X, fixed_y = torch.rand(40, 3, generator=g, dtype=torch.float64), torch.randint(0, 3, (40,), generator=g)
    z = torch.tensor([[0.2, 0.4, 0.6]], dtype=torch.float64)
    params = fit_logreg(torch.cat([fixed_X, z])[None], torch.cat([fixed_y, torch.tensor([2])])[None], 3, 0.1)
    right, _ = glm_closed_form(params, fixed_X, fixed_y, 0.1)
    wrong, _ = glm_closed_form(params, fixed_X, fixed_y, 0.1 * 40 / 41)
    assert (right - z).abs().max() < 1e-8 < (wrong - z).abs().max()


def _penalised_problem(bound: float, targets: torch.Tensor, labels: torch.Tensor, n_classes: int = 3):
    """D⁻ (40 records in [0, 1]^3) and output perturbation's noise-free optimum on D⁻ ∪ {target k}, for each k."""
    g = torch.Generator().manual_seed(7)
    fixed_X = torch.rand(40, 3, generator=g, dtype=torch.float64)
    fixed_y = torch.randint(0, n_classes, (40,), generator=g)
    K = len(targets)
    X = torch.cat([fixed_X.expand(K, -1, -1), targets[:, None]], 1)
    y = torch.cat([fixed_y.expand(K, -1), labels[:, None]], 1)
    theta = fit_penalised(design(clip_rows(X, bound)), y, n_classes, 1e-2)
    return [theta[:, :-1], theta[:, -1]], fixed_X, fixed_y


def test_closed_form_recovers_targets_from_the_noise_free_output_perturbation_optimum() -> None:
    """Output perturbation penalises the intercept and clips features to norm R: solving those optimality
    conditions recovers every target inside the ball to MSE < 1e-6 (in fact ~1e-20); the unpenalised-intercept
    conditions miss them by far."""
    targets = torch.tensor([[0.25, 0.5, 0.75], [1.0, 0.0, 0.5], [0.1, 0.9, 0.3]], dtype=torch.float64)
    labels = torch.tensor([1, 0, 2])
    bound = math.sqrt(3)  # the default R: every record in [0, 1]^3 lies inside
    layers, fixed_X, fixed_y = _penalised_problem(bound, targets, labels)
    records, found = glm_closed_form(layers, fixed_X, fixed_y, 1e-2, intercept_penalised=True, feature_norm=bound)
    assert ((records - targets) ** 2).mean(1).max() < 1e-12
    assert found.tolist() == labels.tolist()
    naive, _ = glm_closed_form(layers, fixed_X, fixed_y, 1e-2)
    assert ((naive - targets) ** 2).mean(1).min() > 1e-4


def test_closed_form_recovers_the_clipped_record_outside_the_ball() -> None:
    """With R = 1 a target of norm 1.5 trained as its projection onto the unit sphere; that is what comes back."""
    targets = torch.tensor([[0.3, 0.4, 0.2], [1.2, 0.9, 0.0]], dtype=torch.float64)  # norms 0.54 and 1.5
    layers, fixed_X, fixed_y = _penalised_problem(1.0, targets, torch.tensor([0, 2]))
    records, _ = glm_closed_form(layers, fixed_X, fixed_y, 1e-2, intercept_penalised=True, feature_norm=1.0)
    torch.testing.assert_close(records, clip_rows(targets, 1.0), rtol=0, atol=1e-7)
    assert ((records[1] - targets[1]) ** 2).mean() > 0.01  # the unclipped target itself is not recovered


def test_objective_is_read_from_the_training_procedure() -> None:
    arch = architecture("logreg", 5, 3, l2=0.1)
    recipe = Recipe(epochs=1, lr=0.1)
    assert training_objective(TrainingProcedure(NonPrivate(NonPrivate.Params()), arch, recipe), 5) == (False, None)
    op = OutputPerturbation(OutputPerturbation.Params(epsilons=[1.0]))
    assert training_objective(TrainingProcedure(op, arch, recipe), 5) == (True, math.sqrt(5))
    clipped = OutputPerturbation(OutputPerturbation.Params(epsilons=[1.0], feature_norm=0.5))
    assert training_objective(TrainingProcedure(clipped, arch, recipe), 5) == (True, 0.5)


@pytest.fixture
def toy() -> Dataset:
    rng = np.random.default_rng(0)
    X = rng.random((200, 5)).astype(np.float32)
    return Dataset("toy", X, rng.integers(0, 3, 200), 3, "tabular", (5,))


def _noise_off(monkeypatch) -> None:
    monkeypatch.setattr(defenses, "laplace", lambda seeds, stream, shape, scale, **_: torch.zeros(len(seeds), *shape,
                                                                                                dtype=torch.float64))


def test_attack_against_noise_free_output_perturbation_in_the_game(toy: Dataset, monkeypatch) -> None:
    """End to end: the game's view, the attack reading the defense from it, the defense's own fit (noise off)."""
    _noise_off(monkeypatch)
    spec = ReconstructionGameSpec(name="reconstruction", fixed=40, targets=10, shadow_targets=20, test=20)
    game = ReconstructionGame(spec, toy, seed=3)
    procedure = TrainingProcedure(OutputPerturbation(OutputPerturbation.Params(epsilons=[1.0])),
                                  architecture("logreg", 5, 3, l2=1e-3), Recipe(epochs=1, lr=0.1))
    outcome = game.play(GLMReconstruction(GLMReconstruction.Params()), game.release(procedure), procedure)
    assert outcome.metrics["mse_mean"] < 1e-6 and outcome.metrics["success_rate"] == 1.0
    assert outcome.metrics["label_accuracy"] == 1.0


def test_candidate_residuals_vanish_for_the_training_candidate() -> None:
    candidates = torch.tensor([[0.25, 0.5, 0.75], [1.0, 0.0, 0.5], [0.1, 0.9, 0.3], [0.5, 0.5, 0.5]],
                              dtype=torch.float64)
    cy = torch.tensor([1, 0, 2, 1])
    drawn = torch.tensor([2, 0, 3])
    layers, fixed_X, fixed_y = _penalised_problem(math.sqrt(3), candidates[drawn], cy[drawn])
    scores = candidate_residuals(layers, fixed_X, fixed_y, candidates, cy, 1e-2, intercept_penalised=True,
                                 feature_norm=math.sqrt(3))
    assert scores.shape == (3, 4)
    assert scores.argmin(1).tolist() == drawn.tolist()
    # The score is √(||G||² + 2x̃ᵀGr + ||x̃||²||r||²): cancellation leaves a floor of about √ε_mach·||G|| ≈ 1e-8
    # (1.05e-8 with this machine's BLAS), so the true candidate's score is held to 1e-7, far below the others'.
    assert scores[torch.arange(3), drawn].max() < 1e-7 < scores.min(1).values.max() + 1.0
    # the same numbers as the gradient formed explicitly for model 0 and candidate 1
    from arena.engine.newton import _gradient

    X = torch.cat([fixed_X, candidates[1:2]])
    Y = torch.nn.functional.one_hot(torch.cat([fixed_y, cy[1:2]]), 3).to(torch.float64)
    theta = torch.cat([layers[0][:1], layers[1][:1, None]], 1)
    g = _gradient(design(clip_rows(X, math.sqrt(3)))[None], Y[None], theta, 1e-2, intercept=True)
    assert scores[0, 1].item() == pytest.approx(41 * g.norm().item(), rel=1e-9)


def _discrete(prior_candidates: int = 6) -> ReconstructionGameSpec:
    return ReconstructionGameSpec(name="reconstruction", fixed=40, targets=12, shadow_targets=30, test=20,
                                  prior="discrete", candidates=prior_candidates)


def test_glm_names_the_exact_candidate_under_a_discrete_prior(toy: Dataset) -> None:
    game = ReconstructionGame(_discrete(), toy, seed=5)
    procedure = TrainingProcedure(NonPrivate(NonPrivate.Params()), architecture("logreg", 5, 3, l2=1e-2),
                                  Recipe(epochs=1, lr=0.1))
    outcome = game.play(GLMReconstruction(GLMReconstruction.Params()), game.release(procedure), procedure)
    assert outcome.metrics["success_rate"] == 1.0 and outcome.metrics["mse_mean"] == 0.0
    assert outcome.metrics["kappa"] == pytest.approx(1 / 6) and outcome.metrics["kappa_exact"] is True


@pytest.mark.slow
def test_reconn_answers_with_a_candidate_under_a_discrete_prior(toy: Dataset) -> None:
    game = ReconstructionGame(_discrete(4), toy, seed=5)
    procedure = TrainingProcedure(NonPrivate(NonPrivate.Params()),
                                  architecture("mlp", 5, 3, hidden=[4], activation="tanh"),
                                  Recipe(epochs=20, lr=0.5, momentum=0.9))
    attack = ReconNN(ReconNN.Params(shadows=80, hidden=[32], epochs=60, batch_size=16, lr=3e-3))
    release = game.release(procedure)
    guess = attack.run(game.view(attack, release, procedure))
    candidates = toy.X[game.candidates]
    assert all((candidates == row).all(1).any() for row in guess.records)  # every answer is a candidate
    outcome = game.play(attack, release, procedure)
    assert outcome.metrics["success_rate"] > 0.5  # κ = 0.25; known initialisation, no noise


def _track(model) -> Track:
    return Track(
        name="t",
        dataset=PluginRef(name="digits"),
        model=model,
        training=TrainingSpec(epochs=1, lr=0.1),
        game=ReconstructionGameSpec(name="reconstruction"),
        defenses=[EntryRef(name="nonprivate")],
        attacks=[EntryRef(name="glm-reconstruction")],
    )


def test_closed_form_applies_to_logistic_regression_only() -> None:
    attack = GLMReconstruction(GLMReconstruction.Params())
    assert attack.skip_reason(_track(PluginRef(name="logreg", l2=0.1))) is None
    reason = attack.skip_reason(_track(PluginRef(name="mlp", hidden=[8])))
    assert reason is not None and "logistic regression" in reason and "'mlp'" in reason


TINY = """
name: tiny-reconstruction
seeds: [0]
tracks:
  - name: logreg
    dataset: {name: synthetic, n: 300, features: 6, classes: 3}
    model: {name: logreg, l2: 0.01}
    training: {epochs: 1, lr: 0.1}
    game: {name: reconstruction, fixed: 40, targets: 12, shadow_targets: 100, test: 50}
    defenses:
      - {name: nonprivate}
      - {name: output-perturbation, epsilons: [1]}
    attacks:
      - {name: glm-reconstruction}
  - name: mlp
    dataset: {name: synthetic, n: 400, features: 6, classes: 3}
    model: {name: mlp, hidden: [4], activation: tanh}
    training: {epochs: 20, lr: 0.5, momentum: 0.9}
    game: {name: reconstruction, fixed: 30, targets: 20, shadow_targets: 300, test: 50}
    defenses:
      - {name: nonprivate}
    attacks:
      - {name: reconn, hidden: [64], epochs: 60, batch_size: 32, lr: 3.0e-3}
      - {name: glm-reconstruction}
"""


@pytest.mark.slow
def test_tiny_reconstruction_tournament(tmp_path: Path, monkeypatch) -> None:
    p = plan([write_scenario(tmp_path / "tiny.yaml", TINY)])
    store = RunStore(tmp_path / "run")
    rows = {(r["track"], r["defense_label"], r["attack"]): r for r in tournament.run(p, store, serial=True)}
    assert len(rows) == 4
    exact = rows[("logreg", "nonprivate", "glm-reconstruction")]
    assert exact["status"] == "ok", exact["error"]
    m = exact["metrics"]
    assert m["success_rate"] == 1.0 and m["label_accuracy"] == 1.0 and m["mse_median"] < 1e-12 and m["n_targets"] == 12
    noisy = rows[("logreg", "output-perturbation(eps=1)", "glm-reconstruction")]
    assert noisy["status"] == "ok" and noisy["claim"]["epsilon"] == 1.0
    assert noisy["metrics"]["mse_mean"] > noisy["metrics"]["oracle_mse_mean"]
    skipped = rows[("mlp", "nonprivate", "glm-reconstruction")]
    assert skipped["status"] == "skipped" and "logistic regression" in skipped["error"]
    learned = rows[("mlp", "nonprivate", "reconn")]
    assert learned["status"] == "ok", learned["error"]
    assert learned["metrics"]["label_accuracy"] is None
    # far better than the best constant guess, the targets' own mean (whose mean MSE is the targets' variance)
    arrays = store.load_arrays(learned["key"])
    targets = arrays["targets"].numpy()
    assert learned["metrics"]["mse_mean"] < 0.5 * ((targets - targets.mean(0)) ** 2).mean()
    for row in rows.values():
        if row["status"] == "ok":
            assert (store.artifact_dir(row["key"]) / GRID_FILE).is_file()
    (matchup,) = [m for m in p.matchups if m.key == learned["key"]]
    monkeypatch.setenv(SECRET_ENV, store.secret().hex())  # a fresh run directory with the run's secret
    again = play_matchup(matchup, str(tmp_path / "again"))  # nothing cached
    assert json.dumps(again["metrics"]) == json.dumps(learned["metrics"])
