"""The language track played end to end by the arena (serial, sandboxed attacks): a tiny GPT-2 fine-tuned on
pydoc topics with canaries, attacked by min-k %++, the reference attack and LiRA; every row ok, the utility a
next-token accuracy, the exposure in range, and the text black box's answers consistent with each other."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from arena import Architecture, Models, TextBlackBox, lm_log_proba, lm_loss
from arena.cli import main
from arena.engine.lm import example_nll
from arena_plugins.lm_models import GPT2, TinyLMParams

SCENARIO = """
name: lang
seeds: [0]
tracks:
  - name: t
    dataset: {name: pydoc-topics, length: 24, limit: 160, tokenizer: {vocab: 300}}
    model: {name: gpt2, layers: 1, dim: 16, heads: 2}
    training: {epochs: 3, lr: 0.01, batch_size: 10}
    game: {name: language, members: 30, test: 20, exposure: {digits: 2, repetitions: [1, 4], per_level: 1}}
    defenses: [{name: lm-finetune}]
    attacks:
      - {name: min-k-plus-plus}
      - {name: lm-reference, references: 2}
      - {name: lm-lira, shadows: 2}
"""


@pytest.mark.slow
def test_the_language_track_plays_end_to_end(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--serial", "--no-report"]) == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(r["attack"] for r in rows) == ["lm-lira", "lm-reference", "min-k-plus-plus"]
    for row in rows:
        assert row["status"] == "ok", row["error"]
        assert 0.0 <= row["utility"] <= 1.0
        m = row["metrics"]
        assert 0.0 <= m["auc"] <= 1.0 and m["perplexity"] > 1.0
        assert 0.0 <= m["exposure"] <= m["exposure_max"] <= math.log2(100)
        assert any(n.startswith("exposure of 2 canaries among 10^2 candidates") for n in row["notes"])
    assert len({r["metrics"]["exposure"] for r in rows}) == 1  # a property of the release, not of the attack


def test_the_text_black_box_answers_log_probabilities_and_losses_of_one_model() -> None:
    arch = Architecture(GPT2(TinyLMParams(layers=1, dim=16, heads=2)), (6,), 11)
    torch.manual_seed(0)
    module = arch.build().eval()
    state = {n: t.detach()[None] for n, t in [*module.named_parameters(), *module.named_buffers()]}
    models = Models(arch, state)
    X = torch.tensor([[1.0, 2, 3, 4, -1, -1], [5.0, 6, 7, 8, 9, 10]])
    box = TextBlackBox(models)
    logp = box.log_proba(X)
    assert logp.shape == (2, 5, 11) and torch.allclose(logp.exp().sum(-1), torch.ones(2, 5), atol=1e-5)
    assert torch.allclose(logp, lm_log_proba(models, X)) and torch.allclose(box.predict_proba(X), logp.exp())
    with torch.no_grad():
        assert torch.allclose(box.loss(X, torch.zeros(2)), example_nll(module, X), atol=1e-6)
    assert torch.allclose(lm_loss(models, X), box.loss(X))
