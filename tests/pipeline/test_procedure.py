"""The training procedure: one cached path for released and shadow models; the cache stores tensors only."""

from __future__ import annotations

import pytest
import torch

from arena.engine.recipe import Recipe
from arena.pipeline.procedure import TrainingProcedure
from arena.pipeline.store import TensorCache
from arena_plugins.defenses import DPSGD, NonPrivate
from tests.conftest import architecture


def data(k: int = 3, n: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.rand(k, n, 8, generator=g), torch.randint(0, 3, (k, n), generator=g)


def make(cache: TensorCache, defense=None) -> TrainingProcedure:
    defense = defense or NonPrivate(NonPrivate.Params())
    return TrainingProcedure(defense, architecture("mlp", 8, 3, hidden=[5]), Recipe(epochs=2, lr=0.1, batch_size=10),
                             cache=cache)


def test_second_identical_request_trains_nothing(tmp_path) -> None:
    X, y = data()
    first = make(TensorCache(tmp_path))
    models, _ = first(X, y, [1, 2, 3], [4, 5, 6])
    second = make(TensorCache(tmp_path))
    again, _ = second(X, y, [1, 2, 3], [4, 5, 6])
    assert (first.stats.trained, second.stats.trained, second.stats.cached) == (3, 0, 3)
    assert list(models.state) == list(again.state)
    assert all(torch.equal(models.state[k], again.state[k]) for k in models.state)
    files = [p for p in (tmp_path / "models").rglob("*") if p.is_file()]
    assert len(files) == 1 and files[0].suffix == ".safetensors"


def test_concurrent_identical_requests_train_once(tmp_path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    X, y = data()
    procs = [make(TensorCache(tmp_path)) for _ in range(2)]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda p: p(X, y, [1, 2, 3], [4, 5, 6]), procs))
    assert sum(p.stats.trained for p in procs) == 3 and sum(p.stats.cached for p in procs) == 3
    one, other = results[0][0].state, results[1][0].state
    assert list(one) == list(other) and all(torch.equal(one[k], other[k]) for k in one)


def test_different_seeds_or_data_are_different_entries(tmp_path) -> None:
    X, y = data()
    proc = make(TensorCache(tmp_path))
    a, _ = proc(X, y, [1, 2, 3], [4, 5, 6])
    b, _ = proc(X, y, [1, 2, 9], [4, 5, 6])
    c, _ = proc(X.flip(0), y.flip(0), [1, 2, 3], [4, 5, 6])
    assert proc.stats.trained == 9
    wa, wb, wc = (m.state["layers.0.weight"] for m in (a, b, c))
    assert torch.equal(wa[:2], wb[:2]) and not torch.equal(wa[2], wb[2])
    assert not torch.equal(wa[0], wc[0])


@pytest.mark.slow
def test_dp_claim_round_trips_through_the_cache(tmp_path) -> None:
    X, y = data(k=1)
    dp = DPSGD(DPSGD.Params(epsilons=[3.0], delta=1e-3))
    fresh, claim = make(TensorCache(tmp_path), dp)(X, y, [1], [2])
    cached, claim_again = make(TensorCache(tmp_path), dp)(X, y, [1], [2])
    assert claim == claim_again
    assert claim.target_epsilon == 3.0 and 0.99 * 3.0 <= claim.epsilon <= 3.0
    assert claim.noise_multiplier > 0 and claim.steps == 2 * 4 and claim.sample_rate == 0.25
    assert "dp_accounting" in claim.accountant
