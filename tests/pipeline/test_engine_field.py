"""A track's ``engine`` (auto | batched | loop): validated like every track field, part of the matchup's key and
definition unless ``auto`` (cached releases never mix engines), and named with its reason in the row notes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arena.cli import main
from arena.pipeline.plan import plan
from tests.conftest import write_scenario

TRACK = """
name: eng
seeds: [0]
tracks:
  - name: t
    dataset: {{name: synthetic, n: 400, features: 8, classes: 2}}
    model: {{name: mlp, hidden: [8]}}
    training: {{epochs: 2, batch_size: 32, lr: 0.1, momentum: 0.9}}
    game: {{name: membership, members: 100, test: 100}}{engine}
    defenses:
      - {{name: nonprivate}}
      - {{name: dpsgd, epsilons: [8], delta: 1.0e-3}}
    attacks:
      - {{name: lira, shadows: 4, fixed_variance: true}}
"""


def scenario(tmp_path: Path, engine: str | None, name: str = "s.yaml") -> Path:
    return write_scenario(tmp_path / name, TRACK.format(engine="" if engine is None else f"\n    engine: {engine}"))


@pytest.mark.slow
def test_the_engine_is_keyed_apart_unless_auto(tmp_path: Path) -> None:
    keys = {}
    for engine in (None, "auto", "batched", "loop"):
        ms = plan([scenario(tmp_path, engine, f"{engine}.yaml")]).matchups
        keys[engine] = ([m.release_key for m in ms], [m.definition["track"] for m in ms])
    assert keys[None] == keys["auto"]  # the default keeps the keys the arena gave before the field existed
    assert len({json.dumps(v) for v in keys.values()}) == 3  # batched and loop each apart, and from auto
    assert plan([scenario(tmp_path, "loop")]).matchups[0].track_identity()["engine"] == "loop"


@pytest.mark.slow
def test_a_loop_track_plays_a_tournament_and_its_rows_name_the_loop_engine(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["run", str(scenario(tmp_path, "loop")), "--out", str(out), "--serial", "--no-report"]) == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["status"] for r in rows] == ["ok", "ok"]
    for row in rows:
        notes = [n for n in row["notes"] if n.startswith("engine: ")]
        assert len(notes) == 1 and notes[0].startswith("engine: loop (plain PyTorch, one model at a time")
        assert "because the track asks for it (engine: loop)" in notes[0]
        assert ("DP-SGD through Opacus" in notes[0]) == (row["defense"] == "dpsgd")
    dp = next(r for r in rows if r["defense"] == "dpsgd")
    assert dp["claim"]["epsilon"] <= 8.0 and dp["claim"]["accountant"].startswith("dp_accounting.rdp")
    assert 0.0 <= dp["metrics"]["auc"] <= 1.0


@pytest.mark.slow
def test_batched_for_a_model_it_cannot_train_is_exit_2_naming_the_field(tmp_path: Path, capsys, monkeypatch) -> None:
    """``engine: batched`` asks the plan's ``batched_problem`` (a built-in model never draws in training, so the
    dropout model's answer is stood in for it here); its refusal is exit 2 naming ``tracks[0].engine``."""
    import arena.pipeline.plan as plan_module
    from arena.engine.architecture import batched_problem
    from tests.engine.models import dropout_mlp

    drop = dropout_mlp(6, 3, 0.5)
    why = batched_problem(type(drop)(drop.model, drop.input_shape, drop.n_classes, engine="batched"))
    monkeypatch.setattr(plan_module, "batched_problem", lambda arch: why if arch.engine == "batched" else None)
    assert main(["validate", str(scenario(tmp_path, "batched"))]) == 2
    err = capsys.readouterr().err
    assert "tracks[0].engine: 'batched' refused: the batched engine cannot train model" in err
    assert "draws random numbers in training" in err and "Traceback" not in err
    assert main(["validate", str(scenario(tmp_path, "loop", "l.yaml"))]) == 0
