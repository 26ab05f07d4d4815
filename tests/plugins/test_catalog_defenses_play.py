"""The catalog's defenses as a scenario names them: bad values refused before any work (exit 2, naming the
field), and a tiny tournament in which every one of them plays, MemGuard answering the attacks' queries."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import arena
from tests.conftest import write_scenario

BAD = {
    "label-smoothing": ("smoothing: 1.5", "smoothing"),
    "early-stopping": ("patience: 0", "patience"),
    "mixup-mmd": ("lam: -1", "lam"),
    "adv-reg": ("attack_steps: 0", "attack_steps"),
    "selena": ("submodels: 3, excluded: 3", ""),
    "dmp": ("temperature: 0", "temperature"),
    "hamp": ("gamma: 2", "gamma"),
    "memguard": ("budget: 3", "budget"),
    "dpsgd-augmult": ("epsilons: [4], delta: 1.0e-3, multiplicity: 0", "multiplicity"),
}


@pytest.mark.subprocess
def test_bad_values_exit_2_naming_the_field(tmp_path: Path) -> None:
    defenses = "\n".join(f"      - {{name: {name}, {bad}}}" for name, (bad, _) in BAD.items())
    defenses += "\n      - {name: dpsgd-augmult, epsilons: [4], delta: 1.0e-3}"  # valid, but no augmentation
    scenario = write_scenario(tmp_path / "bad.yaml", f"""\
name: bad
seeds: [0]
tracks:
  - name: t
    dataset: {{name: digits}}
    model: {{name: cnn}}
    training: {{epochs: 2, lr: 0.05, batch_size: 32}}
    game: {{name: membership, members: 50, test: 100, population: 200}}
    defenses:
{defenses}
    attacks:
      - {{name: threshold-mia}}
""")
    out = subprocess.run([sys.executable, "-m", "arena.cli", "validate", str(scenario)], capture_output=True,
                         text=True)
    text = out.stdout + out.stderr
    assert out.returncode == 2, text
    assert "Traceback" not in text
    for i, (name, (_, field)) in enumerate(BAD.items()):
        assert f"tracks[0].defenses[{i}]{'.' + field if field else ''}" in text, (name, text)
    assert "excluded (3) must be below submodels (3)" in text
    assert (f"tracks[0].training.augment: defense 'dpsgd-augmult' (tracks[0].defenses[{len(BAD)}]) needs "
            "training.augment in effect") in text


TOURNAMENT = {
    "name": "catalog-defenses",
    "seeds": [0],
    "tracks": [{
        "name": "digits-tiny",
        "dataset": {"name": "digits"},
        "model": {"name": "mlp", "hidden": [16]},
        "training": {"epochs": 3, "batch_size": 32, "lr": 0.1, "momentum": 0.9},
        "game": {"name": "membership", "members": 60, "test": 100, "population": 200},
        "defenses": [
            {"name": "nonprivate"}, {"name": "label-smoothing", "smoothing": 0.1}, {"name": "early-stopping"},
            {"name": "mixup-mmd"}, {"name": "adv-reg"}, {"name": "selena", "submodels": 3, "excluded": 1},
            {"name": "dmp"}, {"name": "hamp", "bank": 32}, {"name": "memguard", "steps": 30},
        ],
        "attacks": [{"name": "threshold-mia"}, {"name": "label-only"}],
    }],
}


@pytest.mark.slow
def test_every_defense_plays_and_memguard_leaves_label_only_scores_alone(tmp_path: Path) -> None:
    results = arena.run(TOURNAMENT, out=tmp_path / "run", serial=True, report=False)
    frame = results.frame()
    assert results.exit_status == 0, frame[["defense", "attack", "status"]]
    assert set(frame["status"]) == {"ok"} and len(frame) == 18
    auc = frame.set_index(["defense", "attack"])["auc"]
    # MemGuard trains exactly as nonprivate and never changes a label: the label-only attack sees the same model
    assert auc[("memguard", "label-only")] == pytest.approx(auc[("nonprivate", "label-only")], abs=1e-12)
    # ... while the probability-based attack, whose queries the parent answers through MemGuard, sees other scores
    assert auc[("memguard", "threshold-mia")] != auc[("nonprivate", "threshold-mia")]
    utility = frame.set_index(["defense", "attack"])["utility"]
    assert utility[("memguard", "threshold-mia")] == pytest.approx(utility[("nonprivate", "threshold-mia")])
