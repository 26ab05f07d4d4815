"""SELENA (Tang et al. 2022) and DMP (Shejwalkar & Houmansadr 2021): Split-AI's assignment, soft labels only from
models that never saw the record, validated parameters, alone-vs-batched training."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import pytest
import torch
from pydantic import ValidationError

from arena.engine.seeds import derive_seed
from arena_plugins import distillation
from arena_plugins.distillation import DMP, SELENA, DMPParams, SELENAParams, split_ai_deal
from tests.plugins.tiny_tasks import assert_alone_equals_batched, digits_task


@pytest.mark.parametrize(("cls", "bad"), [(SELENAParams, {"submodels": 1}), (SELENAParams, {"excluded": 0}),
                                          (SELENAParams, {"submodels": 4, "excluded": 4}),
                                          (DMPParams, {"temperature": 0.0}), (DMPParams, {"keep": 1.5})])
def test_bad_parameters_are_refused(cls: type, bad: dict) -> None:
    with pytest.raises(ValidationError):
        cls(**bad)


def test_the_papers_split_ai_is_a_configuration() -> None:
    assert SELENAParams(submodels=25, excluded=10).excluded == 10
    assert SELENA(SELENAParams(submodels=25, excluded=10)).validate_for(2) == []
    assert [f for f, _ in SELENA(SELENAParams(submodels=3, excluded=2)).validate_for(1)] == ["excluded"]


@pytest.mark.parametrize(("n", "K", "L"), [(48, 5, 2), (50, 4, 3), (7, 3, 1), (300, 25, 10)])
def test_split_ai_excludes_each_record_from_exactly_l_submodels_with_balanced_training_sets(
        n: int, K: int, L: int) -> None:
    excluded = split_ai_deal(n, K, L, seed=3)
    assert excluded.shape == (K, n) and excluded.dtype == torch.bool
    assert bool((excluded.sum(0) == L).all())  # every record: excluded from exactly L, in K - L training sets
    sizes = n - excluded.sum(1)
    assert int(sizes.max() - sizes.min()) <= 1 and int(sizes.sum()) == n * (K - L)
    assert torch.equal(excluded, split_ai_deal(n, K, L, seed=3))
    assert not torch.equal(excluded, split_ai_deal(n, K, L, seed=4))


def test_split_ai_exclusion_sets_are_random_l_of_k_subsets() -> None:
    """Not K cyclic windows (the old deal): over many records every one of the C(K, L) subsets turns up, about
    equally often, and each sub-model is excluded for about L/K of the records."""
    n, K, L = 3000, 6, 2
    excluded = split_ai_deal(n, K, L, seed=0)
    subsets = Counter(tuple(torch.nonzero(excluded[:, i]).squeeze(-1).tolist()) for i in range(n))
    assert set(subsets) == {tuple(c) for c in itertools.combinations(range(K), L)}  # all 15, not 6
    expected = n / math.comb(K, L)
    assert max(abs(c - expected) for c in subsets.values()) < 5 * math.sqrt(expected)


def _rows_in(sub: torch.Tensor, X: torch.Tensor) -> tuple[int, ...] | None:
    """The rows of X that ``sub``'s rows are, or None when one of them is not a row of X."""
    match = (sub[:, None, :] == X[None, :, :]).all(-1)
    return tuple(match.any(0).nonzero().squeeze(-1).tolist()) if bool(match.any(1).all()) else None


def test_selena_submodels_train_on_the_records_the_deal_gives_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Model k's K sub-models train on exactly the training sets of its deal (each member in K − L of them)."""
    task = digits_task(n=30, epochs=1)
    K, L = 4, 1
    seen: list[torch.Tensor] = []
    real = distillation.train

    def spy(arch, X, y, recipe, init, seeds):
        seen.extend(X)
        return real(arch, X, y, recipe, init, seeds)

    monkeypatch.setattr(distillation, "train", spy)
    SELENA(SELENAParams(submodels=K, excluded=L)).fit(task)
    assert len(seen) == task.k * K
    for k in range(task.k):
        deal = split_ai_deal(task.n, K, L, derive_seed(int(task.train_seeds[k]), "selena-deal"))
        got = sorted(r for sub in seen if (r := _rows_in(sub, task.X[k])) is not None)
        assert got == sorted(tuple((~deal[s]).nonzero().squeeze(-1).tolist()) for s in range(K))


@pytest.mark.slow
def test_selena_trains_alone_as_in_a_batch() -> None:
    assert_alone_equals_batched(SELENA(SELENAParams(submodels=3, excluded=1)), digits_task())


@pytest.mark.slow
def test_dmp_trains_alone_as_in_a_batch() -> None:
    assert_alone_equals_batched(DMP(DMPParams(keep=0.5, temperature=2.0)), digits_task())
