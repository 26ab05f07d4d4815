"""The README's plugin examples run as written: the model plugin trains inside a scenario, the plain-PyTorch
defense trains K independent models."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from arena.cli import main
from arena.contracts.defense import FitTask
from arena.engine.architecture import Architecture
from arena.engine.recipe import Recipe
from tests.conftest import write_scenario

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _block(marker: str) -> str:
    return next(b for b in re.findall(r"```python\n(.*?)```", README, re.S) if marker in b)


def test_readme_model_plugin_is_used_by_a_scenario(plugin_dist, tmp_path: Path) -> None:
    plugin_dist("arena-tinynet", "arena_tinynet", _block("class TinyNet(Model)"), entry="tinynet")
    scenario = write_scenario(tmp_path / "tiny.yaml", """
        name: tinynet
        seeds: [0]
        tracks:
          - name: digits-tinynet
            dataset: {name: digits}
            model: {name: tinynet, width: 8}
            training: {epochs: 3, batch_size: 32, lr: 0.1, momentum: 0.9}
            game: {name: membership, members: 60, test: 100}
            defenses:
              - {name: nonprivate}
              - {name: dpsgd, epsilons: [8], delta: 1.0e-3}
            attacks:
              - {name: threshold-mia}
    """)
    assert main(["run", str(scenario), "--out", str(tmp_path / "run"), "--serial", "--no-report"]) == 0
    rows = [line for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines() if line]
    assert len(rows) == 2 and all('"status": "ok"' in r for r in rows)


def test_readme_plain_pytorch_defense_trains_each_model_alone() -> None:
    ns: dict = {}
    exec(_block("class LabelSmoothing(Defense)"), ns)  # noqa: S102 - the README's own example
    defense = ns["LabelSmoothing"](ns["SmoothParams"]())
    arch = Architecture(_tiny_cnn(), (1, 8, 8), 10)
    g = torch.Generator().manual_seed(0)
    X, y = torch.rand(3, 40, 64, generator=g), torch.randint(0, 10, (3, 40), generator=g)
    recipe = Recipe(epochs=2, lr=0.1, batch_size=10, momentum=0.9)
    batch = defense.fit(FitTask(arch, recipe, X, y, torch.arange(3), torch.arange(3) + 9)).state
    alone = defense.fit(FitTask(arch, recipe, X[1:2], y[1:2], torch.tensor([1]), torch.tensor([10]))).state
    for name, tensor in batch.items():
        torch.testing.assert_close(tensor[1], alone[name][0], rtol=1e-5, atol=1e-6)
    initial = FitTask(arch, recipe, X, y, torch.arange(3), torch.arange(3) + 9).ensemble().detached()
    assert all(not torch.allclose(batch[k], v) for k, v in initial.items()), "every tensor trained"


def _tiny_cnn():  # noqa: ANN202
    from arena.plugins import registries

    cls = registries().models.get("cnn")
    return cls(cls.Params(channels=[4], hidden=8))
