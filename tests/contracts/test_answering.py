"""Inference-time defenses: ``Models.answering`` post-processes every output (logits, probabilities, losses,
labels), follows ``select`` and ``Models.cat``, and the training procedure caches its tensors with the models."""

from __future__ import annotations

from pathlib import Path

import torch

from arena.contracts.defense import Defense, Fit, FitTask
from arena.contracts.params import NoParams
from arena.contracts.release import Answering, BlackBox, LabelOnly, Models
from arena.engine.ensemble import init_state
from arena.engine.recipe import Recipe
from arena.pipeline.procedure import TrainingProcedure
from arena.pipeline.store import TensorCache
from tests.conftest import architecture


def _shift(logits: torch.Tensor, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    """Adds each model's own offset [K, C] to its logits."""
    return logits + tensors["offset"].unsqueeze(1)


def _models(k: int = 3) -> Models:
    arch = architecture("logreg", 4, 3)
    state = init_state(arch, torch.arange(k))
    offset = torch.arange(k * 3, dtype=torch.float32).reshape(k, 3)
    return Models(arch, state, Answering(_shift, {"offset": offset}))


def test_every_output_goes_through_the_answering_and_follows_select_and_cat() -> None:
    models = _models()
    raw = Models(models.arch, models.state)
    X, y = torch.rand(5, 4), torch.randint(0, 3, (5,))
    offset = models.answering.tensors["offset"]
    torch.testing.assert_close(models.logits(X), raw.logits(X) + offset.unsqueeze(1))
    torch.testing.assert_close(models.predict_proba(X), torch.softmax(raw.logits(X) + offset.unsqueeze(1), -1))
    one = models.select(2)
    torch.testing.assert_close(BlackBox(one).loss(X, y), models.loss(X, y)[2])
    assert torch.equal(LabelOnly(one).predict(X), models.logits(X)[2].argmax(-1))
    pooled = Models.cat([models.select(2), models.select(0)])
    torch.testing.assert_close(pooled.logits(X), models.logits(X)[[2, 0]])
    assert Models.cat([raw.select(1), raw.select(0)]).answering is None


class _Offset(Defense):
    """Trains nothing (the models stay at their initialisation); answers with a per-model offset."""

    name = "offset"
    Params = NoParams
    answers_queries = True

    def fit(self, task: FitTask) -> Fit:
        state = init_state(task.arch, task.init_seeds)
        return Fit(state, None, {"offset": task.train_seeds.to(torch.float32).unsqueeze(1).expand(-1, 3).clone()})

    def answer(self, logits: torch.Tensor, answering: dict[str, torch.Tensor]) -> torch.Tensor:
        return _shift(logits, answering)


def test_the_procedure_caches_the_answering_tensors(tmp_path: Path) -> None:
    arch = architecture("logreg", 4, 3)
    X, y = torch.rand(2, 6, 4), torch.randint(0, 3, (2, 6))
    procedure = TrainingProcedure(_Offset(NoParams()), arch, Recipe(epochs=1, lr=0.1), cache=TensorCache(tmp_path))
    fresh, _ = procedure(X, y, [1, 2], [10, 20])
    again = TrainingProcedure(_Offset(NoParams()), arch, Recipe(epochs=1, lr=0.1), cache=TensorCache(tmp_path))
    cached, _ = again(X, y, [1, 2], [10, 20])
    assert again.stats.cached == 2
    Q = torch.rand(3, 4)
    torch.testing.assert_close(cached.logits(Q), fresh.logits(Q))
    torch.testing.assert_close(cached.logits(Q) - Models(arch, cached.state).logits(Q),
                               torch.tensor([10.0, 20.0]).reshape(2, 1, 1).expand(2, 3, 3))
