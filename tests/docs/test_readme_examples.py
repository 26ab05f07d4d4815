"""The plugin guide's plugins (docs/plugins.md) work as written: each block that is a plugin module is installed as
a real distribution and played in a scenario through ``arena run``, and the plain-PyTorch defense trains K
independent models."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from arena import FitTask, Recipe, dpsgd_epsilon
from arena.cli import EXIT_OK, main
from tests.conftest import architecture, write_scenario
from tests.docs.markdown import DOCS, block

GUIDE = DOCS / "plugins.md"


def _install(plugin_dist, module: str, entry: str | None = None) -> None:
    """The guide's block that starts with ``# <module>.py``, installed as distribution ``<module>``."""
    plugin_dist(module.replace("_", "-"), module, block(GUIDE, f"# {module}.py"), entry=entry)


def _play(tmp_path: Path, scenario: str) -> list[dict]:
    path = write_scenario(tmp_path / "scenario.yaml", scenario)
    run = tmp_path / "run"
    assert main(["run", str(path), "--out", str(run), "--serial", "--no-report"]) == EXIT_OK
    rows = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines() if line]
    assert rows and all(r["status"] == "ok" for r in rows), [r.get("traceback") for r in rows]
    return rows


def _membership(dataset: str, model: str, defenses: str, attacks: str, members: int = 60) -> str:
    return f"""
        name: guide
        seeds: [0]
        tracks:
          - name: guide
            dataset: {dataset}
            model: {model}
            training: {{epochs: 30, batch_size: 32, lr: 0.1, momentum: 0.9}}
            game: {{name: membership, members: {members}, test: 100}}
            defenses: {defenses}
            attacks: {attacks}
    """


@pytest.mark.subprocess
def test_the_model_plugin_is_used_by_a_scenario(plugin_dist, tmp_path: Path) -> None:
    _install(plugin_dist, "arena_tinynet", entry="tinynet")
    rows = _play(tmp_path, _membership("{name: digits}", "{name: tinynet, width: 8}",
                                       "[{name: nonprivate}, {name: dpsgd, epsilons: [8], delta: 1.0e-3}]",
                                       "[{name: threshold-mia}]").replace("epochs: 30", "epochs: 3"))
    assert len(rows) == 2
    assert {r["defense"] for r in rows} == {"nonprivate", "dpsgd"}


@pytest.mark.subprocess
def test_the_attack_plugins_play_a_scenario(plugin_dist, tmp_path: Path) -> None:
    _install(plugin_dist, "arena_coin")
    _install(plugin_dist, "arena_shadowloss")
    rows = _play(tmp_path, _membership("{name: digits}", "{name: mlp, hidden: [64]}", "[{name: nonprivate}]",
                                       "[{name: coin, bias: 0.3}, {name: shadow-loss, shadows: 8}]", members=100)
                 .replace("epochs: 30", "epochs: 100"))
    auc = {r["attack"]: r["metrics"]["auc"] for r in rows}
    assert set(auc) == {"coin", "shadow-loss"}
    # The coin knows nothing: its AUC on 100 + 100 points is chance to within sampling error (sd about 0.04).
    assert abs(auc["coin"] - 0.5) < 0.15
    # Against a non-private MLP that fits its 100 members, the shadows' OUT losses tell members apart.
    assert auc["shadow-loss"] > 0.6


@pytest.mark.subprocess
def test_the_dp_defense_claims_what_its_accountant_gives(plugin_dist, tmp_path: Path) -> None:
    _install(plugin_dist, "arena_fixedsigma")
    (row,) = _play(tmp_path, _membership("{name: digits}", "{name: mlp, hidden: [16]}",
                                         "[{name: fixed-sigma, sigma: 1.0, delta: 1.0e-3}]",
                                         "[{name: threshold-mia}]").replace("epochs: 30", "epochs: 5"))
    claim = row["claim"]
    assert claim["noise_multiplier"] == 1.0 and claim["delta"] == 1.0e-3
    assert math.isclose(claim["sample_rate"], 32 / 60) and claim["steps"] == 5 * math.ceil(60 / 32)
    assert math.isclose(claim["epsilon"], dpsgd_epsilon(1.0, claim["sample_rate"], claim["steps"], 1.0e-3))
    assert 0 < claim["epsilon"] < math.inf


@pytest.mark.slow
def test_the_plain_pytorch_defense_trains_each_model_alone() -> None:
    ns: dict = {}
    exec(block(GUIDE, "class LabelSmoothing(Defense)"), ns)
    defense = ns["LabelSmoothing"](ns["SmoothParams"]())
    arch = architecture("cnn", (1, 8, 8), 10, channels=[4], hidden=8)
    g = torch.Generator().manual_seed(0)
    X, y = torch.rand(3, 40, 64, generator=g), torch.randint(0, 10, (3, 40), generator=g)
    recipe = Recipe(epochs=2, lr=0.1, batch_size=10, momentum=0.9)
    batch = defense.fit(FitTask(arch, recipe, X, y, torch.arange(3), torch.arange(3) + 9)).state
    alone = defense.fit(FitTask(arch, recipe, X[1:2], y[1:2], torch.tensor([1]), torch.tensor([10]))).state
    for name, tensor in batch.items():
        torch.testing.assert_close(tensor[1], alone[name][0], rtol=1e-5, atol=1e-6)
    initial = FitTask(arch, recipe, X, y, torch.arange(3), torch.arange(3) + 9).ensemble().detached()
    assert all(not torch.allclose(batch[k], v) for k, v in initial.items()), "every tensor trained"


@pytest.mark.subprocess
def test_the_plain_pytorch_defense_plays_a_scenario(plugin_dist, tmp_path: Path) -> None:
    _install(plugin_dist, "arena_smooth")
    (row,) = _play(tmp_path, _membership("{name: digits}", "{name: mlp, hidden: [16]}",
                                         "[{name: smooth-labels, smoothing: 0.2}]", "[{name: threshold-mia}]"))
    assert row["defense"] == "smooth-labels" and row["claim"] is None
    assert row["utility"] > 0.5  # digits from 60 records: far above the 0.1 of chance


@pytest.mark.subprocess
def test_the_dataset_plugin_plays_a_scenario(plugin_dist, tmp_path: Path) -> None:
    _install(plugin_dist, "arena_circles")
    (row,) = _play(tmp_path, _membership("{name: circles, n: 600, noise: 0.05}", "{name: mlp, hidden: [32]}",
                                         "[{name: nonprivate}]", "[{name: threshold-mia}]", members=100)
                   .replace("epochs: 30", "epochs: 200"))
    assert row["utility"] > 0.8  # two well-separated circles: an MLP learns them (chance is 0.5)


@pytest.mark.subprocess
def test_the_game_and_metric_plugins_play_a_scenario(plugin_dist, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ARENA_TRUSTED", "arena-parity")  # a game with its attack: trusted by name, as the guide says
    _install(plugin_dist, "arena_parity", entry="parity")
    _install(plugin_dist, "arena_parity_errors")
    (row,) = _play(tmp_path, """
        name: parity
        seeds: [0]
        rank_by: parity_errors
        tracks:
          - name: digits-parity
            dataset: {name: digits}
            model: {name: logreg}
            training: {epochs: 5, batch_size: 32, lr: 0.1}
            game: {name: parity, train: 200, test: 300}
            defenses:
              - {name: nonprivate}
            attacks:
              - {name: parity-from-prediction}
    """)
    assert row["game"] == "parity"
    accuracy, errors = row["metrics"]["parity_accuracy"], row["metrics"]["parity_errors"]
    assert accuracy > 0.6 and errors == round((1 - accuracy) * 300)  # chance is 0.5
    assert row["metric_info"]["parity_errors"] == {"higher_is_better": False, "bounds": [0.0, None]}
