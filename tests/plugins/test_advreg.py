"""Adversarial regularisation (Nasr et al. 2018): validated parameters; with λ = 0 the attack never reaches the
classifier, which then trains as the engine does on every member; no reference set, no training; alone-vs-batched."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from arena.engine.trainer import train
from arena_plugins.advreg import AdversarialRegularisation, AdvRegParams
from tests.plugins.tiny_tasks import assert_alone_equals_batched, digits_task


@pytest.mark.parametrize("bad", [{"lam": -1.0}, {"attack_steps": 0}, {"hidden": 0},
                                 {"attack_lr": 0.0}, {"lam": float("inf")}])
def test_bad_parameters_are_refused(bad: dict) -> None:
    with pytest.raises(ValidationError):
        AdvRegParams(**bad)


@pytest.mark.slow
def test_without_the_regulariser_the_classifier_trains_as_the_engine_on_every_member() -> None:
    task = digits_task()
    fit = AdversarialRegularisation(AdvRegParams(lam=0.0)).fit(task)
    state = train(task.arch, task.X, task.y, task.recipe, task.init_seeds, task.train_seeds)
    for name in state:
        torch.testing.assert_close(fit.state[name], state[name], rtol=1e-7, atol=1e-9)
    regularised = AdversarialRegularisation(AdvRegParams(lam=3.0)).fit(task)
    assert not torch.allclose(regularised.state["layers.0.weight"], state["layers.0.weight"])


@pytest.mark.slow
def test_adversarial_regularisation_trains_alone_as_in_a_batch() -> None:
    assert_alone_equals_batched(AdversarialRegularisation(AdvRegParams(attack_steps=2)), digits_task())


def test_the_retired_reference_fraction_is_ignored_with_a_warning_and_no_reference_set_is_refused() -> None:
    with pytest.warns(DeprecationWarning, match="reference no longer applies"):
        assert AdvRegParams(reference=0.25) == AdvRegParams()
    with pytest.raises(ValueError, match="needs a reference set"):
        AdversarialRegularisation(AdvRegParams()).fit(digits_task(reference=0))
