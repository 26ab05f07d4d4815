"""SELENA (Tang et al. 2022) and DMP (Shejwalkar & Houmansadr 2021): Split-AI's assignment, soft labels only from
models that never saw the record, validated parameters, alone-vs-batched training."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from arena_plugins.distillation import DMP, SELENA, DMPParams, SELENAParams, split_ai_plan
from tests.plugins.tiny_tasks import assert_alone_equals_batched, digits_task


@pytest.mark.parametrize(("cls", "bad"), [(SELENAParams, {"submodels": 1}), (SELENAParams, {"excluded": 0}),
                                          (SELENAParams, {"submodels": 4, "excluded": 4}),
                                          (DMPParams, {"reference": 1.0}), (DMPParams, {"temperature": 0.0}),
                                          (DMPParams, {"keep": 1.5})])
def test_bad_parameters_are_refused(cls: type, bad: dict) -> None:
    with pytest.raises(ValidationError):
        cls(**bad)


@pytest.mark.parametrize(("n", "M", "L"), [(48, 5, 2), (50, 4, 3), (7, 3, 1)])
def test_split_ai_keeps_each_record_from_at_least_l_submodels_that_never_train_on_it(n: int, M: int, L: int) -> None:
    task = digits_task(n=n)
    train_rows, kept_from = split_ai_plan(task, M, L)
    assert train_rows.shape[:2] == (task.k, M)
    assert bool((kept_from.sum(1) >= L).all())
    assert int(kept_from.sum(1).min()) == L  # most records are kept from exactly L
    for k in range(task.k):
        for s in range(M):
            assert not bool(kept_from[k, s, train_rows[k, s]].any())  # a sub-model never teaches its own records
            assert len(set(train_rows[k, s].tolist())) == train_rows.shape[-1]
    assert not torch.equal(train_rows[0], train_rows[1])  # each model deals its records in its own order


@pytest.mark.slow
def test_selena_trains_alone_as_in_a_batch() -> None:
    assert_alone_equals_batched(SELENA(SELENAParams(submodels=3, excluded=1)), digits_task())


@pytest.mark.slow
def test_dmp_trains_alone_as_in_a_batch() -> None:
    assert_alone_equals_batched(DMP(DMPParams(keep=0.5, temperature=2.0)), digits_task())
