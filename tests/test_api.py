"""The Python API: the README's five-line example runs; results come back as a DataFrame, a leaderboard and a
report; a scenario given as a dict is written into the run directory first; the CLI keeps its exit statuses."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

import arena
from arena.api import Results, UnknownNameError
from arena.pipeline.row import FRAME_COLUMNS, SCHEMA_VERSION
from arena.pipeline.scenario import ScenarioError

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
TINY = {
    "name": "tiny-api",
    "seeds": [0],
    "tracks": [{
        "name": "synth",
        "dataset": {"name": "synthetic", "n": 600, "features": 8, "classes": 2},
        "model": {"name": "mlp", "hidden": [8]},
        "training": {"epochs": 2, "lr": 0.1, "batch_size": 32},
        "game": {"name": "membership", "members": 100, "test": 100},
        "defenses": [{"name": "nonprivate"}, {"name": "dpsgd", "epsilons": [4], "delta": 1.0e-5}],
        "attacks": [{"name": "threshold-mia"}],
    }],
}


@pytest.mark.slow
def test_readme_python_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", README, re.S) if "arena.run(" in b]
    assert len([line for line in block.splitlines() if line.strip()]) <= 5
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(TINY))
    # The same lines on a tiny scenario, one matchup at a time (no Ray start-up in a unit test).
    code = block.replace("scenarios/quickstart.yaml", str(scenario)).replace(
        'out="runs/quickstart"', f'out="{tmp_path / "run"}", serial=True')
    assert code != block and "serial=True" in code
    ns: dict = {}
    exec(code, ns)
    frame = next(v for v in ns.values() if isinstance(v, pd.DataFrame))
    assert len(frame) == 2 and {"auc", "tpr@1%fpr", "seed", "defense_label"} <= set(frame.columns)
    out = capsys.readouterr().out
    assert "report" in out and (tmp_path / "run" / "report" / "index.html").is_file()


@pytest.mark.slow
def test_run_a_dict_frame_leaderboard_report_and_load(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    results = arena.run(TINY, out=run_dir, serial=True, report=False)
    assert isinstance(results, Results) and results.exit_status == 0 and results.written == 2
    kept = run_dir / "scenarios" / "tiny-api.yaml"
    assert yaml.safe_load(kept.read_text()) == TINY  # the dict, written as YAML into the run directory
    frame = results.frame()
    assert list(frame["status"]) == ["ok", "ok"] and frame["auc"].between(0, 1).all()
    assert list(frame.columns[:len(FRAME_COLUMNS)]) == list(FRAME_COLUMNS)  # the row schema's frame columns first
    assert {r["schema"] for r in results.rows} == {SCHEMA_VERSION}
    assert {r["versions"]["game"].split(" / ")[1] for r in results.rows} == {"membership v1"}
    assert frame["tpr@0.1%fpr"].isna().all()  # 100 non-members cannot resolve 0.1%
    board = results.leaderboard()
    assert set(board["rank_by"]) == {"tpr@1%fpr"} and {"auc", "auc_low", "auc_high"} <= set(board.columns)
    assert list(results.leaderboard(metric="auc", track="synth")["rank_by"]) == ["auc", "auc"]
    with pytest.raises(UnknownNameError, match="known: .*auc"):
        results.leaderboard(metric="nope")
    with pytest.raises(UnknownNameError, match="known: synth"):
        results.leaderboard(track="nope")
    page = results.report()
    assert page == run_dir / "report" / "index.html" and page.is_file()
    again = arena.load(run_dir)
    pd.testing.assert_frame_equal(again.frame(), frame)
    # Re-running resumes: nothing new is played.
    assert arena.run(TINY, out=run_dir, serial=True, report=False).written == 0


def test_bad_input_raises_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError) as exc:
        arena.run({**TINY, "seeds": []}, out=tmp_path / "run", serial=True)
    assert any("seeds" in p for p in exc.value.problems)
    with pytest.raises(ScenarioError, match="rank_by"):
        arena.run({**TINY, "rank_by": "mse_mean"}, out=tmp_path / "run2", serial=True)
    with pytest.raises(FileNotFoundError):
        arena.load(tmp_path / "nowhere")


@pytest.mark.slow
def test_cli_run_is_the_api_with_its_exit_statuses(tmp_path: Path, capsys) -> None:
    from arena.cli import EXIT_INPUT, EXIT_OK, main

    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(TINY))
    assert main(["run", str(scenario), "--out", str(tmp_path / "run"), "--serial", "--no-report"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "ranked by tpr@1%fpr" in out and "2 matchups: 2 ok" in out
    assert main(["run", str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "r2")]) == EXIT_INPUT
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "results.jsonl").write_text("not ours\n")
    assert main(["run", str(scenario), "--out", str(tmp_path / "foreign"), "--serial"]) == EXIT_INPUT
