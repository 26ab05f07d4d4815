"""The output-perturbation defense: released θ = exact penalised optimum + Lap(sqrt(P) Δ₂ / ε), and its claim."""

import math

import pytest
import torch

from arena.contracts.defense import FitTask
from arena.engine import rng
from arena.engine.architecture import Architecture
from arena.engine.dense import to_layers
from arena.engine.laplace import laplace
from arena.engine.newton import design
from arena.engine.output_perturbation import clip_rows, fit_penalised
from arena.engine.recipe import Recipe
from arena_plugins.defenses import OutputPerturbation, OutputPerturbationParams
from tests.conftest import architecture


def _task(arch: Architecture, n: int = 20, K: int = 2) -> FitTask:
    g = torch.Generator().manual_seed(0)
    return FitTask(
        arch=arch,
        recipe=Recipe(epochs=1, lr=0.1),
        X=torch.rand(K, n, arch.n_features, generator=g),
        y=torch.randint(0, arch.n_classes, (K, n), generator=g),
        init_seeds=torch.zeros(K, dtype=torch.int64),
        train_seeds=torch.tensor([11, 12]),
    )


def test_release_is_optimum_plus_laplace_at_the_hand_computed_scale():
    arch = architecture("logreg", 4, 3, l2=0.1)
    task = _task(arch)
    eps, R = 2.0, 1.5
    fit = OutputPerturbation(OutputPerturbationParams(epsilons=[eps], feature_norm=R)).fit(task)
    # by hand: L = sqrt(2) sqrt(R² + 1), Δ₂ = 2L/(nλ) + 2 tol/λ, P = (4 + 1) * 3 = 15, b = sqrt(P) Δ₂ / ε
    delta2 = 2 * math.sqrt(2) * math.sqrt(R**2 + 1) / (20 * 0.1) + 2 * 1e-10 / 0.1
    b = math.sqrt(15) * delta2 / eps
    theta = fit_penalised(design(clip_rows(task.X.double(), R)), task.y, 3, 0.1)
    noise = laplace(task.train_seeds, rng.stream(rng.Purpose.NOISE), (5, 3), b)
    W, bias = to_layers(fit.state)  # W [K, in, out]
    torch.testing.assert_close(W, theta[:, :4] + noise[:, :4])
    torch.testing.assert_close(bias, theta[:, 4] + noise[:, 4])
    assert fit.claim.epsilon == eps and fit.claim.target_epsilon == eps and fit.claim.delta == 0.0
    assert "Laplace" in fit.claim.accountant
    assert f"Lap({b:.4g})" in fit.claim.mechanism


def test_default_feature_bound_is_the_longest_vector_in_the_unit_cube():
    arch = architecture("logreg", 4, 2, l2=0.1)
    task = _task(arch)
    default = OutputPerturbation(OutputPerturbationParams(epsilons=[1.0])).fit(task)
    explicit = OutputPerturbation(OutputPerturbationParams(epsilons=[1.0], feature_norm=2.0)).fit(task)
    assert list(default.state) == list(explicit.state) == ["layers.0.weight", "layers.0.bias"]
    for name in default.state:
        torch.testing.assert_close(default.state[name], explicit.state[name])


def test_expands_one_configuration_per_epsilon():
    configs = OutputPerturbation.expand(OutputPerturbationParams(epsilons=[1.0, 10.0]))
    assert [OutputPerturbation(c).target_epsilon() for c in configs] == [1.0, 10.0]


@pytest.mark.parametrize(
    "model, solver, message",
    [
        ({"name": "mlp", "hidden": [3], "l2": 0.1}, "auto", "logreg"),
        ({"name": "logreg", "l2": 0.0}, "auto", "l2 > 0"),
        ({"name": "logreg", "l2": 0.1}, "gradient", "exact optimum"),
    ],
)
def test_rejects_what_its_sensitivity_does_not_cover(model, solver, message):
    task = _task(architecture(input_shape=4, n_classes=2, **model))
    task = FitTask(task.arch, task.recipe, task.X, task.y, task.init_seeds, task.train_seeds, solver=solver)
    with pytest.raises(ValueError, match=message):
        OutputPerturbation(OutputPerturbationParams(epsilons=[1.0])).fit(task)
