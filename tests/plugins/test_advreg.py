"""Adversarial regularisation (Nasr et al. 2018): validated parameters; with λ = 0 the attack never reaches the
classifier, which then trains as the engine does on the rows outside the reference set; alone-vs-batched."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from arena.engine.trainer import train
from arena_plugins.advreg import AdversarialRegularisation, AdvRegParams
from arena_plugins.defense_kit import rows, split
from tests.plugins.tiny_tasks import assert_alone_equals_batched, digits_task


@pytest.mark.parametrize("bad", [{"lam": -1.0}, {"reference": 0.0}, {"attack_steps": 0}, {"hidden": 0},
                                 {"attack_lr": 0.0}, {"lam": float("inf")}])
def test_bad_parameters_are_refused(bad: dict) -> None:
    with pytest.raises(ValidationError):
        AdvRegParams(**bad)


@pytest.mark.slow
def test_without_the_regulariser_the_classifier_trains_as_the_engine_on_the_kept_rows() -> None:
    task = digits_task()
    fit = AdversarialRegularisation(AdvRegParams(lam=0.0, reference=0.25)).fit(task)
    keep, _ = split(task, 0.25, "adv-reg")
    state = train(task.arch, rows(task.X, keep), rows(task.y, keep), task.recipe, task.init_seeds, task.train_seeds)
    for name in state:
        torch.testing.assert_close(fit.state[name], state[name], rtol=1e-7, atol=1e-9)
    regularised = AdversarialRegularisation(AdvRegParams(lam=3.0, reference=0.25)).fit(task)
    assert not torch.allclose(regularised.state["layers.0.weight"], state["layers.0.weight"])


@pytest.mark.slow
def test_adversarial_regularisation_trains_alone_as_in_a_batch() -> None:
    assert_alone_equals_batched(AdversarialRegularisation(AdvRegParams(attack_steps=2)), digits_task())
