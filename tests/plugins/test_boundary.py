"""The boundary-distance label-only attack (HopSkipJump): against a linear classifier, whose distance to the boundary
is |w·x + b| / ‖w‖, its distances are those of real adversarial points (never below the formula), close to the
formula when the budget allows, and no record spends more than its query budget."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from arena_plugins.boundary import BoundaryMIA, BoundaryParams, boundary_distances


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class Linear:
    """Two classes split by the hyperplane w·x + b = 0 through the centre of [0, 1]^d; counts the rows it labels."""

    def __init__(self, d: int) -> None:
        self.w = torch.randn(d, generator=torch.Generator().manual_seed(0))
        self.b = -(0.5 * self.w).sum()
        self.rows = 0

    def predict(self, X: torch.Tensor) -> torch.Tensor:
        self.rows += len(X)
        return (X @ self.w + self.b > 0).long()

    def distance(self, X: torch.Tensor) -> np.ndarray:
        return ((X @ self.w + self.b).abs() / self.w.norm()).numpy()


def records(n: int, d: int) -> torch.Tensor:
    return 0.5 + 0.3 * (torch.rand(n, d, generator=torch.Generator().manual_seed(1)) - 0.5)


def test_distances_approach_the_formula_from_above_within_the_budget() -> None:
    d, n = 10, 40
    model, X = Linear(d), records(n, d)
    y = model.predict(X)
    true = model.distance(X)
    ratios = {}
    for budget in (60, 600):
        model.rows = 0
        dist, used = boundary_distances(model, X, y, BoundaryParams(max_queries=budget), seed=0)
        assert np.all(used <= budget) and model.rows == used.sum(), "every query is counted, none over budget"
        assert np.all(dist >= true * (1 - 1e-5)), "the distance of a point the target really mislabels"
        ratios[budget] = np.median(dist / true)
    assert ratios[600] < 1.05 and ratios[600] < ratios[60]


def test_a_mislabelled_record_scores_zero_with_one_query() -> None:
    d = 6
    model, X = Linear(d), records(8, d)
    y = 1 - model.predict(X)  # every record labelled wrongly by the target
    dist, used = boundary_distances(model, X, y, BoundaryParams(max_queries=50), seed=0)
    assert np.all(dist == 0) and np.all(used == 1)


def test_the_smallest_budget_still_gives_adversarial_distances() -> None:
    d = 6
    model, X = Linear(d), records(10, d)
    y = model.predict(X)
    dist, used = boundary_distances(model, X, y, BoundaryParams(max_queries=2), seed=0)
    assert np.all(used <= 2) and np.all(np.isfinite(dist)) and np.all(dist >= model.distance(X) * (1 - 1e-5))


def test_the_attack_scores_distance_and_thresholds_on_the_population() -> None:
    d = 8
    model = Linear(d)
    X = records(60, d)
    view = SimpleNamespace(labels_model=model, challenge_X=X[:20], challenge_y=model.predict(X[:20]),
                           population_X=X[20:], population_y=model.predict(X[20:]), seed=5)
    guess = BoundaryMIA(BoundaryMIA.Params(max_queries=300, population_records=30, fpr=0.2)).run(view)
    assert np.corrcoef(guess.scores, model.distance(X[:20]))[0, 1] > 0.99, "farther from the boundary, higher"
    pick = torch.from_numpy(np.sort(np.random.default_rng(5).permutation(40)[:30]))  # the attack's draw
    reference, _ = boundary_distances(model, X[20:][pick], view.population_y[pick],
                                      BoundaryParams(max_queries=300, population_records=30), seed=6)
    assert guess.decisions.tolist() == (guess.scores > np.quantile(reference, 0.8)).tolist()


@pytest.mark.parametrize("bad", [{"max_queries": 1}, {"initial_evals": 0}, {"gamma": 0.0}, {"fpr": 0.0},
                                 {"population_records": 0}])
def test_parameters_are_validated(bad) -> None:
    with pytest.raises(ValidationError):
        BoundaryMIA.Params(**bad)
