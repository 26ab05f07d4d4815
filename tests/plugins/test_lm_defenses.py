"""Language-model defenses: DP-SGD fine-tuning's claim is the accountant's, deduplication drops exactly the records
sharing an n-gram with an earlier one, and a defense refuses a dataset that is not text."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from arena import PAD, Architecture, FitTask, Recipe, dpsgd_epsilon, steps_and_rate
from arena_plugins.lm_defenses import LMDPSGD, Dedup, DedupParams, FineTune, FineTuneParams, LMDPSGDParams, duplicates
from arena_plugins.lm_models import Llama, TinyLMParams

V, L = 13, 6


def _task(n: int = 40, k: int = 1, recipe: Recipe | None = None) -> FitTask:
    arch = Architecture(Llama(TinyLMParams(layers=1, dim=16, heads=2)), (L,), V)
    X = torch.randint(0, V, (k, n, L), generator=torch.Generator().manual_seed(0)).float()
    return FitTask(arch, recipe or Recipe(epochs=2, lr=0.01, batch_size=10), X, torch.zeros(k, n, dtype=torch.long),
                   torch.arange(k) + 1, torch.arange(k) + 7)


@pytest.mark.slow
def test_dp_finetuning_claims_what_the_accountant_says() -> None:
    task = _task()
    fit = LMDPSGD(LMDPSGDParams(epsilons=[2.0], delta=1e-3, clip=0.5, lora=2)).fit(task)
    claim = fit.claim
    assert claim is not None and claim.target_epsilon == 2.0 and claim.epsilon <= 2.0
    steps, q = steps_and_rate(40, task.recipe)
    assert (claim.steps, claim.sample_rate) == (steps, q) == (8, 0.25)
    assert claim.epsilon == pytest.approx(dpsgd_epsilon(claim.noise_multiplier, q, steps, 1e-3), rel=1e-9)
    assert claim.epsilon > 1.9  # calibrated to the target, not far below it
    assert "LoRA rank 2" in claim.mechanism


def test_dp_delta_must_be_below_one_over_n() -> None:
    d = LMDPSGD(LMDPSGDParams(epsilons=[1.0], delta=0.05))
    assert [f for f, _ in d.validate_for(100)] == ["delta"]
    assert d.validate_for(10) == []


def test_duplicates_are_records_sharing_an_ngram_with_an_earlier_kept_one() -> None:
    X = np.array([
        [1, 2, 3, 4, 5, 6],
        [9, 2, 3, 4, 8, 8],  # shares 2 3 4 with record 0
        [7, 7, 7, 1, 2, PAD],  # shares no 3-gram
        [1, 2, PAD, PAD, PAD, PAD],  # shorter than the n-gram and unseen as a whole
        [1, 2, PAD, PAD, PAD, PAD],  # an exact copy of record 3
    ], dtype=np.float32)
    assert duplicates(X, 3).tolist() == [False, True, False, False, True]
    assert duplicates(X, 4).tolist() == [False, False, False, False, True]


def test_dedup_trains_on_the_kept_records_only() -> None:
    task = _task(n=12)
    X = task.X.clone()
    X[0, 6:] = X[0, :6]  # the second half repeats the first
    task = FitTask(task.arch, task.recipe, X, task.y, task.init_seeds, task.train_seeds)
    assert duplicates(X[0].numpy(), 6).tolist() == [False] * 6 + [True] * 6
    deduped = Dedup(DedupParams(ngram=6)).fit(task).state
    half = FitTask(task.arch, task.recipe, X[:, :6], task.y[:, :6], task.init_seeds, task.train_seeds)
    plain = FineTune(FineTuneParams()).fit(half).state
    assert all(torch.equal(deduped[k], plain[k]) for k in plain)


def test_a_language_defense_refuses_records_that_are_not_token_sequences() -> None:
    task = _task()
    flat = FitTask(Architecture(Llama(TinyLMParams()), (2, 3), V), task.recipe, task.X, task.y, task.init_seeds,
                   task.train_seeds)
    with pytest.raises(ValueError, match="token records"):
        FineTune(FineTuneParams()).fit(flat)
