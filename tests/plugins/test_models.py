"""The built-in model plugins: what they build for each dataset shape, their parameter checks, how scenarios that
name them are validated, and a third-party model installed as a real distribution playing a tournament."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from arena.cli import main
from arena.plugins import registries
from tests.conftest import architecture, write_scenario

SHAPES = [(1, 8, 8), (1, 28, 28), (3, 32, 32)]
SMALL = {
    "logreg": {},
    "mlp": {"hidden": [8, 4]},
    "cnn": {"channels": [4, 8], "hidden": 8},
    "cnn-group": {"channels": [4, 8], "hidden": 8, "norm": "group", "groups": 2},
    "wrn": {"depth": 10, "width": 1, "groups": 4},
}


@pytest.mark.parametrize("shape", SHAPES, ids=["digits", "mnist", "cifar10"])
@pytest.mark.parametrize("model", list(SMALL))
def test_each_builtin_builds_for_image_shapes_and_outputs_batch_by_classes(model, shape):
    torch.manual_seed(0)
    arch = architecture(model.split("-")[0], shape, 10, **SMALL[model])
    out = arch.build()(torch.rand(3, *shape))
    assert out.shape == (3, 10) and torch.isfinite(out).all()


@pytest.mark.parametrize("model", ["logreg", "mlp"])
def test_dense_models_take_flat_records(model):
    arch = architecture(model, 30, 2, **SMALL[model])
    assert arch.build()(torch.rand(5, 30)).shape == (5, 2)


def test_parameter_counts_are_the_hand_computed_ones():
    def count(name: str, shape, classes: int = 10, **params) -> int:
        return architecture(name, shape, classes, **params).template().n_params

    assert count("logreg", (1, 8, 8)) == 64 * 10 + 10
    assert count("mlp", (1, 8, 8), hidden=[16]) == 64 * 16 + 16 + 16 * 10 + 10
    convs = 1 * 16 * 9 + 16 + 16 * 32 * 9 + 32  # two 3×3 conv blocks, 16 and 32 filters
    head = 64 * 10 + 10
    # two 2×2 pools: 8×8 → 2×2 and 28×28 → 7×7 feature maps of 32 channels into the 64-wide dense layer
    assert count("cnn", (1, 8, 8)) == convs + 32 * 2 * 2 * 64 + 64 + head == 13_706
    assert count("cnn", (1, 28, 28)) == convs + 32 * 7 * 7 * 64 + 64 + head == 105_866
    assert count("cnn", (3, 32, 32)) == convs + 2 * 16 * 9 + 32 * 8 * 8 * 64 + 64 + head == 136_874
    assert count("cnn", (1, 8, 8), norm="group") == 13_706 + 2 * (16 + 32)  # GroupNorm scale and shift
    wrn = count("wrn", (3, 32, 32))  # WRN-16-4: 2.75M parameters (Zagoruyko & Komodakis 2016)
    assert 2.7e6 < wrn < 2.8e6


@pytest.mark.parametrize("depth", [10, 16, 22, 28, 40])
def test_wrn_accepts_depths_of_the_form_6n_plus_4(depth):
    params = registries().models.get("wrn").Params(depth=depth)
    assert params.depth == depth


@pytest.mark.parametrize("depth", [4, 12, 15, 17, 20])
def test_wrn_rejects_other_depths(depth):
    with pytest.raises(ValidationError, match="depth"):
        registries().models.get("wrn").Params(depth=depth)


@pytest.mark.parametrize("model", ["cnn", "wrn"])
def test_image_models_refuse_flat_records_with_a_clear_message(model):
    arch = architecture(model, 30, 2)
    with pytest.raises(ValueError, match=r"needs image records of shape \(channels, height, width\), not \(30,\)"):
        arch.build()


def test_arena_plugins_lists_the_models(capsys):
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    section = out.split("models:\n")[1].split("defenses:")[0]
    names = {line.split()[0] for line in section.splitlines() if line.strip()}
    assert names == {"logreg", "mlp", "cnn", "wrn", "torchvision", "timm", "gpt2", "llama", "hf-local"}
    assert "from privacy-arena" in section


def _scenario(tmp_path: Path, dataset: str, model: str, defense: str) -> Path:
    return write_scenario(tmp_path / "s.yaml", f"""
        name: models
        seeds: [0]
        tracks:
          - name: t
            dataset: {dataset}
            model: {model}
            training: {{epochs: 1, batch_size: 32, lr: 0.1}}
            game: {{name: membership, members: 50, test: 50}}
            defenses:
              - {defense}
            attacks:
              - {{name: threshold-mia}}
    """)


@pytest.mark.slow
def test_a_batch_norm_model_under_dpsgd_plays_with_group_norm_and_says_so(tmp_path, capsys):
    """A BatchNorm CNN under DP-SGD is no longer refused: it trains with GroupNorm in place of BatchNorm, and its
    rows say so; the same model without per-example clipping keeps its BatchNorm and has no such note."""
    from arena.engine.architecture import GROUP_NORM_NOTE

    path = _scenario(tmp_path, "{name: digits}", "{name: cnn, channels: [4], hidden: 0, norm: batch}",
                     "{name: dpsgd, epsilons: [8], delta: 1.0e-3}\n              - {name: nonprivate}")
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--serial", "--no-report"]) == 0, capsys.readouterr().err
    rows = {r["defense"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert all(r["status"] == "ok" for r in rows.values()), [r["error"] for r in rows.values()]
    assert rows["dpsgd"]["notes"][0] == GROUP_NORM_NOTE and rows["dpsgd"]["claim"]["epsilon"] <= 8
    assert GROUP_NORM_NOTE not in rows["nonprivate"]["notes"]


BATCH_NORM_ACT = """
import torch
from torch import nn

from arena import Model, ModelParams, hookimpl


class BatchNormAct(nn.BatchNorm2d):  # normalises, then activates (as timm's BatchNormAct2d): no GroupNorm stands in
    def forward(self, x):
        return torch.relu(super().forward(x))


class Fused(Model):
    name = "fused"

    def build(self, input_shape, n_classes):
        c, h, w = input_shape
        return nn.Sequential(nn.Conv2d(c, 4, 3, padding=1), BatchNormAct(4), nn.Flatten(),
                             nn.Linear(4 * h * w, n_classes))


@hookimpl
def register_models(register):
    register(Fused)
"""


def test_a_batch_norm_that_group_norm_cannot_replace_is_refused_under_dpsgd(plugin_dist, tmp_path, capsys):
    plugin_dist("arena-fused", "arena_fused_plugin", BATCH_NORM_ACT)
    path = _scenario(tmp_path, "{name: digits}", "{name: fused}", "{name: dpsgd, epsilons: [4], delta: 1.0e-3}")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "tracks[0].model: model 'fused': BatchNorm layers that cannot be replaced by GroupNorm: 1 (BatchNormAct)" \
        in err and "defense 'dpsgd' (tracks[0].defenses[0]) cannot clip per-example gradients" in err
    ok = _scenario(tmp_path, "{name: digits}", "{name: fused}", "{name: nonprivate}")
    assert main(["validate", str(ok)]) == 0, capsys.readouterr().err


def test_an_image_model_on_a_table_is_a_clear_validation_error(tmp_path, capsys):
    path = _scenario(tmp_path, "{name: breast_cancer}", "{name: cnn}", "{name: nonprivate}")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "tracks[0].model" in err and "'cnn'" in err and "breast_cancer" in err
    assert "(channels, height, width)" in err


def test_unknown_model_parameters_are_validation_errors(tmp_path, capsys):
    path = _scenario(tmp_path, "{name: digits}", "{name: cnn, widht: 3}", "{name: nonprivate}")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "tracks[0].model" in err and "widht" in err


TWO_LAYER = """
from torch import nn

from arena import Model, ModelParams, hookimpl


class TwoLayerParams(ModelParams):
    width: int = 6


class TwoLayer(Model):
    '''Flatten, linear, ReLU, linear: the smallest useful classifier, from outside the arena.'''

    name = "two-layer"
    version = "0.3"
    Params = TwoLayerParams

    def build(self, input_shape, n_classes):
        features = 1
        for s in input_shape:
            features *= s
        return nn.Sequential(nn.Flatten(), nn.Linear(features, self.params.width), nn.ReLU(),
                             nn.Linear(self.params.width, n_classes))


@hookimpl
def register_models(register):
    register(TwoLayer)
"""

THIRD_PARTY_SCENARIO = """
name: third-party-model
seeds: [0]
tracks:
  - name: digits-two-layer
    dataset: {name: digits}
    model: {name: two-layer, width: 8, l2: 0.001}
    training: {epochs: 2, batch_size: 32, lr: 0.1, momentum: 0.9}
    game: {name: membership, members: 50, test: 50}
    defenses:
      - {name: nonprivate}
      - {name: dpsgd, epsilons: [8], delta: 1.0e-3}
    attacks:
      - {name: threshold-mia}
"""


def test_a_third_party_model_distribution_plays_a_tournament(plugin_dist, tmp_path, capsys):
    plugin_dist("arena-two-layer", "arena_two_layer_plugin", TWO_LAYER, version="0.3.1")
    entry = registries().models.entry("two-layer")
    assert (entry.distribution, entry.version) == ("arena-two-layer", "0.3.1")
    assert architecture("two-layer", (1, 8, 8), 10).dense is None  # trains through torch.func, not the hand path

    scenario = write_scenario(tmp_path / "third.yaml", THIRD_PARTY_SCENARIO)
    out = tmp_path / "run"
    assert main(["run", str(scenario), "--out", str(out), "--serial", "--no-report"]) == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(r["defense_label"] for r in rows) == ["dpsgd(eps=8)", "nonprivate"]
    assert all(r["status"] == "ok" for r in rows), [r.get("error") for r in rows]
    assert all(r["attack"] == "threshold-mia" and 0.0 <= r["metrics"]["auc"] <= 1.0 for r in rows)
    (dp,) = [r for r in rows if r["defense_label"] != "nonprivate"]
    assert dp["claim"]["epsilon"] <= 8.0
