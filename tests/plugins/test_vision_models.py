"""The torchvision and timm model plugins: refused naming the field when the library is missing, unknown names and
reserved options refused, and (with the library, or a stand-in module with the library's two calls) a model built
for the dataset, grey-scale repeated to RGB, too-small inputs refused, and tiny tournaments played, BatchNorm
becoming GroupNorm under DP-SGD."""

from __future__ import annotations

import importlib.util
import json
import sys
import types

import pytest
import torch
from torch import nn

from arena.cli import main
from arena.engine.architecture import GROUP_NORM_NOTE
from tests.conftest import architecture, write_scenario

SCENARIO = """
name: vision
seeds: [0]
tracks:
  - name: t
    dataset: {name: digits}
    model: MODEL
    training: {epochs: 1, batch_size: 32, lr: 0.05}
    game: {name: membership, members: 40, test: 40}
    defenses:
      - {name: nonprivate}
      - {name: dpsgd, epsilons: [8], delta: 1.0e-3}
    attacks:
      - {name: threshold-mia}
"""


def _scenario(tmp_path, model: str):
    return write_scenario(tmp_path / "vision.yaml", SCENARIO.replace("MODEL", model))


def _play(tmp_path, capsys, model: str) -> dict[str, dict]:
    out = tmp_path / "run"
    assert main(["run", str(_scenario(tmp_path, model)), "--out", str(out), "--serial", "--no-report"]) == 0, \
        capsys.readouterr().err
    rows = {r["defense"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert all(r["status"] == "ok" for r in rows.values()), [r["error"] for r in rows.values()]
    return rows


@pytest.mark.parametrize("library", ["torchvision", "timm"])
def test_a_missing_library_is_exit_2_naming_the_field(tmp_path, capsys, monkeypatch, library):
    monkeypatch.setitem(sys.modules, library, None)  # import raises ImportError, as when it is not installed
    path = _scenario(tmp_path, f"{{name: {library}, architecture: resnet18}}")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"tracks[0].model.architecture: Value error, {library} is not installed" in err, err
    assert "privacy-arena[vision]" in err and "Traceback" not in err


def test_timm_takes_no_weights(tmp_path, capsys):
    path = _scenario(tmp_path, "{name: timm, architecture: resnet18, pretrained: true}")
    assert main(["validate", str(path)]) == 2
    assert "tracks[0].model.pretrained" in capsys.readouterr().err


# ---- a stand-in for torchvision.models: list_models and get_model, as torchvision >= 0.15 has them -------------

def _small_resnet(num_classes: int, width: int = 8) -> nn.Module:
    """Conv, BatchNorm, ReLU, adaptive pooling and a linear head: any image size works."""
    return nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, num_classes))


def _needs_large_images(num_classes: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 11), nn.Flatten(), nn.LazyLinear(num_classes))


@pytest.fixture
def fake_torchvision(monkeypatch):
    builders = {"small_resnet": _small_resnet, "needs_large_images": _needs_large_images}
    models = types.ModuleType("torchvision.models")
    calls: list[dict] = []

    def get_model(name, **config):
        calls.append({"name": name, **config})
        assert config.pop("weights") is None
        return builders[name](**config)

    models.list_models = lambda module=None: sorted(builders)
    models.get_model = get_model
    package = types.ModuleType("torchvision")
    package.models = models
    monkeypatch.setitem(sys.modules, "torchvision", package)
    monkeypatch.setitem(sys.modules, "torchvision.models", models)
    return calls


def test_a_torchvision_model_is_built_for_the_dataset_without_weights(fake_torchvision):
    arch = architecture("torchvision", (1, 8, 8), 10, architecture="small_resnet", options={"width": 4})
    out = arch.build()(torch.rand(3, 1, 8, 8))  # grey-scale repeated to RGB
    assert out.shape == (3, 10)
    assert fake_torchvision[-1] == {"name": "small_resnet", "weights": None, "num_classes": 10, "width": 4}


@pytest.mark.slow  # three validations
def test_torchvision_names_and_options_are_checked(fake_torchvision, tmp_path, capsys):
    cases = {"{name: torchvision, architecture: smal_resnet}": "tracks[0].model.architecture: Value error, "
             "torchvision has no classification model 'smal_resnet' (2 known); did you mean 'small_resnet'?",
             "{name: torchvision, architecture: small_resnet, options: {weights: DEFAULT}}":
                 "tracks[0].model.options: Value error, weights: set by the arena",
             "{name: torchvision, architecture: needs_large_images}":
                 "torchvision model 'needs_large_images' does not run on records of shape (1, 8, 8)"}
    for model, expected in cases.items():
        assert main(["validate", str(_scenario(tmp_path, model))]) == 2
        err = capsys.readouterr().err
        assert expected in err, err


def test_only_grey_scale_and_rgb_records_go_to_torchvision(fake_torchvision):
    arch = architecture("torchvision", (2, 8, 8), 10, architecture="small_resnet")
    with pytest.raises(ValueError, match="not 2 channels"):
        arch.build()


@pytest.mark.slow
def test_a_torchvision_stand_in_with_batch_norm_plays_under_dpsgd_with_group_norm(fake_torchvision, tmp_path,
                                                                                 capsys):
    rows = _play(tmp_path, capsys, "{name: torchvision, architecture: small_resnet, options: {width: 4}}")
    assert rows["dpsgd"]["notes"][0] == GROUP_NORM_NOTE
    assert GROUP_NORM_NOTE not in rows["nonprivate"]["notes"]


# ---- the real libraries, where installed -------------------------------------------------------------------

TORCHVISION_HOW = ("to run it, install a torch beside which torchvision imports, e.g. `.venv/bin/python -m pip "
                   "install torch==2.14.1 torchvision==0.29.1` (CUDA builds, ~5.5 GB, which run on CPU too: PyPI's "
                   "torchvision wheels need torch's CUDA libraries, so beside a CPU-only torch they fail to import)")
"""How to run the tests that need the real torchvision, said in their skip reason."""

def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None and importlib.import_module(name) is not None
    except Exception:  # noqa: BLE001 - a torchvision wheel for another torch fails on import
        return False


@pytest.mark.slow
@pytest.mark.skipif(not _importable("torchvision"),
                    reason=f"torchvision is not installed or does not import; {TORCHVISION_HOW}")
def test_a_torchvision_resnet18_plays_a_tiny_tournament_group_norm_fixed_under_dpsgd(tmp_path, capsys):
    rows = _play(tmp_path, capsys, "{name: torchvision, architecture: resnet18}")
    assert rows["dpsgd"]["notes"][0] == GROUP_NORM_NOTE and rows["dpsgd"]["claim"]["epsilon"] <= 8


@pytest.mark.slow
@pytest.mark.skipif(not _importable("timm"), reason="timm is not installed (or does not import)")
def test_a_timm_model_plays_a_tiny_tournament(tmp_path, capsys):
    rows = _play(tmp_path, capsys, "{name: timm, architecture: resnet10t, pretrained: false}")
    assert rows["dpsgd"]["notes"][0] == GROUP_NORM_NOTE
