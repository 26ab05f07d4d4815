"""Labels say what differs: a plugin's name plus only the parameters that differ between its entries on the track
(and a configuration's ε), or the entry's own ``label:`` (short, printable, unique per track). Labels never enter
a key, so relabelling replays nothing; the full parameters stay in the rows, the CSV/JSON and the report's legend."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from arena.api import Results
from arena.cli import main
from arena.pipeline.labels import Labelled, labels
from arena.pipeline.plan import plan
from arena.pipeline.scenario import ScenarioError
from arena.pipeline.store import RunStore
from arena.results.report.html import render_page
from tests.conftest import write_scenario

TRACK = """
name: lbl
seeds: [0]
tracks:
  - name: t
    dataset: {{name: synthetic, n: 600, features: 8, classes: 2}}
    model: {{name: mlp, hidden: [8]}}
    training: {{epochs: 2, batch_size: 32, lr: 0.1, momentum: 0.9}}
    game: {{name: membership, members: 100, test: 100}}
    defenses:
{defenses}
    attacks:
{attacks}
"""


def scenario(tmp_path: Path, defenses: list[str], attacks: list[str] = ("{name: threshold-mia}",),
             name: str = "s.yaml") -> Path:
    return write_scenario(tmp_path / name, TRACK.format(defenses="\n".join(f"      - {d}" for d in defenses),
                                                        attacks="\n".join(f"      - {a}" for a in attacks)))


def planned(path: Path) -> tuple[list[str], list[str]]:
    ms = plan([path]).matchups
    return list(dict.fromkeys(m.defense.label for m in ms)), list(dict.fromkeys(m.attack.label for m in ms))


def test_a_label_names_the_plugin_and_only_what_differs(tmp_path: Path) -> None:
    path = scenario(tmp_path, [
        "{name: nonprivate}",
        "{name: nonprivate, training: {epochs: 4}}",
        "{name: dpsgd, epsilons: [1, 8], delta: 1.0e-3, clip: 2.0, accountant: pld,"
        " training: {batch_size: 50, lr: 2.0, momentum: 0.0, epochs: 3, ema: 0.9}}",
    ], ["{name: threshold-mia}", "{name: lira, shadows: 4, fixed_variance: true}",
        "{name: lira, shadows: 8, fixed_variance: true}"])
    defenses, attacks = planned(path)
    # the recipe overrides and every parameter the two DP-SGD configurations share are left out; ε always shown
    assert defenses == ["nonprivate(training.epochs=2)", "nonprivate(training.epochs=4)", "dpsgd(eps=1)",
                        "dpsgd(eps=8)"]
    assert attacks == ["threshold-mia", "lira(shadows=4)", "lira(shadows=8)"]


def test_one_entry_of_a_plugin_is_its_name(tmp_path: Path) -> None:
    path = scenario(tmp_path, ["{name: nonprivate, training: {epochs: 4, ema: 0.5}}",
                               "{name: dpsgd, epsilons: [8], delta: 1.0e-3, training: {batch_size: 100}}"],
                    ["{name: lira, shadows: 4}"])
    assert planned(path) == (["nonprivate", "dpsgd(eps=8)"], ["lira"])


def test_an_entry_label_is_used_and_a_sweep_says_which_configuration(tmp_path: Path) -> None:
    path = scenario(tmp_path, ["{name: nonprivate, label: baseline}",
                               "{name: dpsgd, epsilons: [1, 8], delta: 1.0e-3, label: DP-SGD}"],
                    ["{name: threshold-mia, label: loss threshold}"])
    assert planned(path) == (["baseline", "DP-SGD(eps=1)", "DP-SGD(eps=8)"], ["loss threshold"])


def test_labels_never_change_keys(tmp_path: Path) -> None:
    plain = scenario(tmp_path, ["{name: nonprivate}", "{name: dpsgd, epsilons: [1, 8], delta: 1.0e-3}"],
                     ["{name: threshold-mia}"], "a.yaml")
    named = scenario(tmp_path, ["{name: nonprivate, label: base}",
                                "{name: dpsgd, epsilons: [1, 8], delta: 1.0e-3, label: dp}"],
                     ["{name: threshold-mia, label: thr}"], "b.yaml")
    a, b = plan([plain]).matchups, plan([named]).matchups
    assert [m.key for m in a] == [m.key for m in b] and [m.release_key for m in a] == [m.release_key for m in b]
    assert {m.defense.label for m in a} != {m.defense.label for m in b}


@pytest.mark.parametrize(("entry", "field", "message"), [
    ("{name: nonprivate, label: '" + "x" * 41 + "'}", "tracks[0].defenses[0].label", "at most 40 characters"),
    ('{name: nonprivate, label: "tab\\there"}', "tracks[0].defenses[0].label", "printable"),
    ("{name: nonprivate, label: ' padded'}", "tracks[0].defenses[0].label", "printable"),
    ("{name: nonprivate, label: ''}", "tracks[0].defenses[0].label", "at least 1 character"),
])
def test_a_bad_label_is_refused_at_its_field(tmp_path: Path, capsys, entry: str, field: str, message: str) -> None:
    path = scenario(tmp_path, [entry])
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: {field}: " in err and message in err, err


def test_a_label_is_unique_per_track(tmp_path: Path) -> None:
    path = scenario(tmp_path, ["{name: nonprivate}", "{name: dpsgd, epsilons: [8], delta: 1.0e-3, label: nonprivate}"],
                    ["{name: threshold-mia, label: a}", "{name: lira, shadows: 4, label: a}"])
    with pytest.raises(ScenarioError) as caught:
        plan([path])
    problems = "\n".join(caught.value.problems)
    assert (f"{path}: tracks[0].defenses[1].label: 'nonprivate' is already the label of tracks[0].defenses[0]"
            in problems)
    assert f"{path}: tracks[0].attacks[1].label: 'a' is already the label of tracks[0].attacks[0]" in problems


def test_labels_of_configurations_that_share_everything_but_a_default(tmp_path: Path) -> None:
    """A parameter set to its default on one entry and left out on the other is no difference."""
    assert labels([Labelled("x", {"a": 1, "b": 2}), Labelled("x", {"a": 1, "b": 3}), Labelled("y", {"a": 5})]) == \
        ["x(b=2)", "x(b=3)", "y"]
    assert labels([Labelled("x", {"t.augment.crop": 4, "lr": 0.5}), Labelled("x", {"t.augment.crop": 0, "lr": 0.5})]) \
        == ["x(t.augment.crop=4)", "x(t.augment.crop=0)"]


@pytest.mark.slow
def test_relabelling_a_run_replays_nothing_and_every_output_follows(tmp_path: Path, capsys) -> None:
    first = scenario(tmp_path, ["{name: nonprivate, training: {epochs: 3}}",
                                "{name: dpsgd, epsilons: [8], delta: 1.0e-3, clip: 2.0}"], name="first.yaml")
    out = tmp_path / "run"
    assert main(["run", str(first), "--out", str(out), "--serial", "--no-report"]) == 0
    assert "(2 played by this run" in capsys.readouterr().out
    second = scenario(tmp_path, ["{name: nonprivate, training: {epochs: 3}, label: baseline}",
                                 "{name: dpsgd, epsilons: [8], delta: 1.0e-3, clip: 2.0, label: dp}"],
                      ["{name: threshold-mia, label: loss threshold}"], name="second.yaml")
    assert main(["run", str(second), "--out", str(out), "--serial", "--no-report"]) == 0  # its page is rendered below
    printed = capsys.readouterr().out
    assert "(0 played by this run, 2 from earlier runs)" in printed and "baseline" in printed
    assert len(RunStore(out).results()) == 2  # no row was written again
    results = Results(out)
    assert {(r["defense_label"], r["attack_label"]) for r in results.rows} == {("baseline", "loss threshold"),
                                                                               ("dp", "loss threshold")}
    assert set(results.frame()["defense_label"]) == {"baseline", "dp"}
    (board,) = results.boards()
    assert set(board.cells.index) == {"baseline", "dp"} and list(board.cells.columns) == ["loss threshold"]

    # the full parameters: CSV and JSON columns, and the report's legend
    assert main(["leaderboard", str(out), "--format", "csv"]) == 0
    records = {r["defense"]: r for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    dp = json.loads(records["dp"]["defense_params"])
    assert records["dp"]["defense_plugin"] == "dpsgd" and dp["clip"] == 2.0 and dp["delta"] == 1e-3
    assert dp["training"]["epochs"] == 2 and json.loads(records["baseline"]["defense_params"])["training"][
        "epochs"] == 3
    assert records["dp"]["attack_plugin"] == "threshold-mia" and "fpr" in json.loads(records["dp"]["attack_params"])
    assert main(["leaderboard", str(out), "--format", "json"]) == 0
    (track,) = json.loads(capsys.readouterr().out)
    assert {r["defense"]: r["defense_params"]["clip"] for r in track["rows"] if r["defense"] == "dp"} == {"dp": 2.0}
    page = render_page(RunStore(out))
    legend = page[page.index("Legend"):]
    assert "baseline" in legend and "training.epochs=3" in legend and "clip=2" in legend and "nonprivate" in legend
    assert "loss threshold" in legend and "threshold-mia" in legend


def test_a_label_from_validated_parameters_is_printable() -> None:
    """An attack's ``Params`` validator may return any string (issue 40, E): its label shows the control characters
    and newlines as escapes, never raw."""
    from arena.pipeline.labels import params_text

    made = labels([Labelled("evil", {"tag": "\x1b]0;pwned\x07\nFAKE"}), Labelled("evil", {"tag": "b"})])
    assert made[0] == "evil(tag=\\x1b]0;pwned\\x07\\nFAKE)" and made[1] == "evil(tag=b)"
    assert params_text({"t\x1b": "\r\u202e"}) == "t\\x1b=\\x0d\\u202e"
