"""Bad parameters of the gradients game, of its defenses and of its attacks: exit 2 before any work, naming the
file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from arena.cli import main

SCENARIO = """
name: gradients-bad
seeds: [0]
tracks:
  - name: digits-mlp
    dataset: {name: digits}
    model: {name: mlp, hidden: [16]}
    training: {epochs: 1, batch_size: 32, lr: 0.1}
    game: {name: gradients, batch_size: 2, batches: 4, pretrain: 100, population: 50, test: 50}
    defenses:
      - {name: nonprivate}
      - {name: gradient-pruning, rates: [0.5]}
    attacks:
      - {name: analytic-first-layer}
"""

BAD = [
    ("batch size 0", "batch_size: 2", "batch_size: 0", "tracks[0].game.batch_size"),
    ("unknown field", "batches: 4,", "batches: 4, rounds: 3,", "tracks[0].game.rounds"),
    ("labels", "batches: 4,", "batches: 4, labels: some,", "tracks[0].game.labels"),
    ("threshold", "batches: 4,", "batches: 4, psnr_threshold: -3,", "tracks[0].game.psnr_threshold"),
    ("too many records", "batches: 4,", "batches: 900,", "tracks[0].game.batches"),
    ("secure aggregation needs room", "{name: nonprivate}", "{name: secure-aggregation, clients: 400}",
     "tracks[0].defenses[0].clients"),
    ("a training defense", "{name: nonprivate}", "{name: dpsgd, epsilons: [1], delta: 1.0e-5}",
     "tracks[0].defenses[0].name"),
    ("pruning rate 1", "rates: [0.5]", "rates: [1.0]", "tracks[0].defenses[1].rates"),
    ("client delta above 1/B", "{name: nonprivate}", "{name: client-dpsgd, epsilons: [1], delta: 0.6}",
     "tracks[0].defenses[0].delta"),
    ("attack of another game", "{name: analytic-first-layer}", "{name: glm-reconstruction}",
     "tracks[0].attacks[0]"),
]


@pytest.mark.parametrize("what,old,new,field", BAD, ids=[b[0] for b in BAD])
def test_bad_parameters_exit_2_naming_file_and_field(tmp_path: Path, capsys, what: str, old: str, new: str,
                                                     field: str) -> None:
    assert old in SCENARIO
    path = tmp_path / "bad.yaml"
    path.write_text(SCENARIO.replace(old, new, 1))
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--serial"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: {field}" in err, err
    assert "Traceback" not in err
    assert not out.exists()


def test_the_scenario_itself_validates(tmp_path: Path) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(SCENARIO)
    assert main(["validate", str(path)]) == 0
