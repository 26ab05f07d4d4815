"""HAMP (Chen & Pattabiraman 2024): its soft labels' entropy, answers that keep the ranking (so the label) and
take their scores from random inputs, validated parameters, alone-vs-batched training."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

from arena.contracts.release import Answering, LabelOnly, Models
from arena_plugins.defense_kit import smoothed
from arena_plugins.hamp import HAMP, HAMPParams, reorder_like, true_class_probability
from tests.plugins.tiny_tasks import assert_alone_equals_batched, digits, digits_task


@pytest.mark.parametrize("bad", [{"gamma": 0.0}, {"gamma": 1.0}, {"alpha": -0.1}, {"bank": 0}, {"gamma": "x"}])
def test_bad_parameters_are_refused(bad: dict) -> None:
    with pytest.raises(ValidationError):
        HAMPParams(**bad)


@pytest.mark.parametrize(("gamma", "C"), [(0.5, 10), (0.9, 10), (0.99, 3), (0.2, 100)])
def test_soft_labels_have_the_threshold_entropy_and_keep_the_label(gamma: float, C: int) -> None:
    p = true_class_probability(gamma, C)
    label = smoothed(torch.tensor([1]), C, p, torch.float64)[0]
    h = -(label * label.log()).sum().item()
    assert h == pytest.approx(gamma * math.log(C), rel=1e-9)
    assert int(label.argmax()) == 1 and label.sum().item() == pytest.approx(1.0)


def test_reorder_keeps_the_ranking_of_the_query() -> None:
    scores = torch.tensor([[0.1, 0.6, 0.3]])
    like = torch.tensor([[2.0, -1.0, 0.5]])  # ranking: class 0, class 2, class 1
    torch.testing.assert_close(reorder_like(scores, like), torch.tensor([[0.6, 0.1, 0.3]]))


@pytest.mark.slow
def test_answers_keep_labels_and_carry_the_banks_scores() -> None:
    task = digits_task(epochs=10)
    fit = HAMP(HAMPParams(bank=16)).fit(task)
    defense = HAMP(HAMPParams(bank=16))
    raw = Models(task.arch, fit.state)
    answered = Models(task.arch, fit.state, Answering(defense.answer, fit.answering))
    X = digits()[0][:200]
    out, raw_out = answered.predict_proba(X), raw.predict_proba(X)
    assert torch.equal(out.argmax(-1), raw_out.argmax(-1))
    assert torch.equal(LabelOnly(answered.select(0)).predict(X), LabelOnly(raw.select(0)).predict(X))
    bank = fit.answering["bank"]  # [K, M, C] sorted scores of random inputs
    sorted_out = out.sort(-1, descending=True).values
    for k in range(task.k):  # every answer's scores are one of the model's bank rows
        distance = torch.cdist(sorted_out[k], bank[k]).min(dim=1).values
        assert float(distance.max()) < 1e-6
    assert float((out - raw_out).abs().max()) > 0.01


@pytest.mark.slow
def test_hamp_trains_alone_as_in_a_batch() -> None:
    assert_alone_equals_batched(HAMP(HAMPParams(bank=8)), digits_task())
