"""The leaderboard's metrics: ranked by the game's ranking metric (TPR at 1% FPR for membership) with its primary
metric (AUC) beside it, both read from the rows; every metric exported with its interval; bootstrap intervals by
the registered game's ``resample`` below five seeds (t-intervals for a game no longer registered); n/r where the
non-members cannot resolve an FPR."""

from __future__ import annotations

import csv
import io
import json
import zlib

import numpy as np
import pandas as pd
import pytest
import torch

from arena.cli import EXIT_INPUT, EXIT_OK, main
from arena.engine.seeds import resample_seed
from arena.games.membership.metrics import membership_scores, resample
from arena.pipeline.execute import game_columns, metric_info
from arena.pipeline.store import RunStore
from arena.results import leaderboard
from arena.results.audit import saved_arrays


def make_run(root, seeds=(0, 1), n_out=100, shift=1.0, metric_info_rows=True, game="membership") -> RunStore:
    """Two defenses × two attacks, ``n_out`` non-members, scores saved as a real run saves them; the rows carry how
    to read them (``metric_info``, the game's primary and ranking metric) unless ``metric_info_rows`` is False
    (rows written before they did)."""
    store = RunStore(root)
    columns = game_columns("membership") if metric_info_rows else {}
    for d, strength in (("nonprivate", shift), ("dpsgd(eps=1)", shift / 4)):
        for a, factor in (("loss", 1.0), ("lira", 2.0)):
            for seed in seeds:
                key = f"{d}-{a}-{seed}"
                rng = np.random.default_rng(zlib.crc32(key.encode()))
                member = np.r_[np.ones(100, np.int8), np.zeros(n_out, np.int8)]
                scores = rng.normal(size=100 + n_out) + strength * factor * member
                metrics, notes, points = membership_scores(scores, member, scores > 0.5)
                store.save_arrays(key, {"scores": torch.from_numpy(scores), "is_member": torch.from_numpy(member)})
                row = {"key": key, "scenario": "s", "track": "t", "game": game,
                       "defense": d.split("(")[0], "defense_label": d, "epsilon": 1.0 if "eps" in d else None,
                       "attack": a, "attack_label": a, "seed": seed, "status": "ok", "utility": 0.9,
                       "metrics": metrics, "operating_points": points, "notes": notes, "claim": None, "error": None,
                       **columns}
                store.append_result(row)
    return store


def test_membership_is_ranked_by_tpr_at_1pct_with_auc_beside_and_bootstrap_below_5_seeds(tmp_path) -> None:
    store = make_run(tmp_path / "run")
    rows = store.results()
    assert {(r["primary_metric"], r["rank_metric"]) for r in rows} == {("auc", "tpr@1%fpr")}
    (board,) = leaderboard.build(rows, arrays=saved_arrays(store))
    assert board.metric == "tpr@1%fpr" and board.beside == ("auc",)
    assert board.interval_method.startswith("95% intervals: percentile bootstrap over challenge points")
    iv = board.intervals["nonprivate", "lira"]
    assert iv.method == "bootstrap" and iv.low <= iv.mean <= iv.high
    (t_board,) = leaderboard.build(rows)  # nothing to resample: no interval (never a 2-seed t), and it says why
    assert {iv.method for iv in t_board.intervals.values()} == {"none"}
    assert "no interval where a cell has fewer than 5 seeds" in t_board.interval_method
    assert "no saved scores were given to resample" in t_board.interval_method
    # The bootstrap interval reflects the 100 + 100 points behind each AUC, whatever two seeds happen to agree on.
    boot = board.grids["auc"].intervals["nonprivate", "lira"]
    assert boot.high - boot.low > 0.02
    five = make_run(tmp_path / "five", seeds=(0, 1, 2, 3, 4))
    (board5,) = leaderboard.build(five.results(), arrays=saved_arrays(five))
    assert board5.interval_method.startswith("95% t-intervals of the means over seeds (5 seeds)")
    assert all(iv.method == "t" for iv in board5.intervals.values())


def test_an_unresolvable_fpr_is_n_r_with_a_warning_never_a_number(tmp_path) -> None:
    store = make_run(tmp_path / "run", n_out=50)  # 50 non-members: FPR resolves to 2%, not 1%
    rows = store.results()
    (board,) = leaderboard.build(rows, rank_by="tpr@1%fpr")
    assert board.grids["tpr@1%fpr"].not_resolvable == {(d, a) for d in board.means.index for a in board.means.columns}
    assert (board.cells == "n/r").all().all() and board.means.isna().all().all()
    assert any("tpr@1%fpr cannot be resolved" in w and "1/n_nonmembers > FPR" in w for w in board.warnings)
    text = leaderboard.render_table([board])
    assert "note: t: tpr@1%fpr cannot be resolved" in text
    records = list(csv.DictReader(io.StringIO(leaderboard.render_csv([board]))))
    assert {r["tpr@1%fpr"] for r in records} == {"n/r"} and {r["tpr@1%fpr_low"] for r in records} == {""}
    # Without an explicit metric the default gives way to the primary metric, and says so.
    (fallback,) = leaderboard.build(rows)
    assert fallback.metric == "auc" and any("ranked by auc instead" in w for w in fallback.warnings)


def test_rows_carry_direction_and_bounds_so_no_plugin_is_needed(tmp_path) -> None:
    info = metric_info("membership")
    assert info["auc"] == {"higher_is_better": True, "bounds": [0.0, 1.0]}
    json.dumps(info, allow_nan=False)  # no infinities in a results line
    rows = make_run(tmp_path / "run").results()
    for r in rows:  # a metric the registry does not know, declared lower-is-better by the row itself
        r["metrics"]["privacy_loss"] = {"loss": 0.2, "lira": 0.1}[r["attack"]]
        r["metric_info"]["privacy_loss"] = {"higher_is_better": False, "bounds": [0.0, None]}
    (board,) = leaderboard.build(rows, rank_by="privacy_loss")
    assert board.metric == "privacy_loss" and not board.higher_is_better
    assert board.attack_ranking.index[0] == "lira"  # lower is the stronger attack here


@pytest.mark.slow
def test_leaderboard_command_metric_track_and_every_metric_in_csv(tmp_path, capsys) -> None:
    store = make_run(tmp_path / "run")
    assert main(["leaderboard", str(store.root), "--metric", "tpr@1%fpr", "--track", "t", "--format", "csv"]) == EXIT_OK
    out = capsys.readouterr().out
    records = list(csv.DictReader(io.StringIO(out)))
    assert len(records) == 4 and {r["rank_by"] for r in records} == {"tpr@1%fpr"}
    for name in ("auc", "advantage", "balanced_accuracy", "tpr@10%fpr", "tpr@1%fpr", "tpr@0.1%fpr"):
        assert name in records[0] and f"{name}_low" in records[0] and f"{name}_high" in records[0]
    assert {r["tpr@0.1%fpr"] for r in records} == {"n/r"}  # 100 non-members
    assert {r["interval"] for r in records} == {"bootstrap"}
    assert main(["leaderboard", str(store.root), "--metric", "tpr@0.1%fpr", "--format", "json"]) == EXIT_OK
    captured = capsys.readouterr()
    assert "tpr@0.1%fpr cannot be resolved" in captured.err  # the warning, outside the JSON
    data = json.loads(captured.out)
    assert data[0]["rank_by"] == "tpr@0.1%fpr" and data[0]["cells"]["nonprivate"]["lira"] == "n/r"
    assert main(["leaderboard", str(store.root), "--metric", "nope"]) == EXIT_INPUT
    assert "known: " in capsys.readouterr().err
    assert main(["leaderboard", str(store.root), "--track", "elsewhere"]) == EXIT_INPUT
    assert "known: t" in capsys.readouterr().err


def test_scenario_rank_by_is_read_from_the_run_directory_and_validated(tmp_path, capsys) -> None:
    store = make_run(tmp_path / "run")
    store.write_text("scenarios/s.yaml", "name: s\nseeds: [0]\nrank_by: auc\ntracks: []\n")
    assert leaderboard.rank_by_of(store.root) == {}  # an invalid file is skipped, not trusted
    from tests.conftest import write_scenario

    good = """
        name: s
        seeds: [0, 1]
        rank_by: auc
        tracks:
          - name: t
            dataset: {name: synthetic, n: 400, features: 8, classes: 2}
            model: {name: mlp, hidden: [4]}
            training: {epochs: 1, lr: 0.1}
            game: {name: membership, members: 50, test: 50}
            defenses: [{name: nonprivate}]
            attacks: [{name: threshold-mia}]
    """
    path = write_scenario(tmp_path / "s.yaml", good)
    store.write_text("scenarios/s.yaml", path.read_text())
    assert leaderboard.rank_by_of(store.root) == {"s": "auc"}
    assert main(["leaderboard", str(store.root), "--format", "json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)[0]["rank_by"] == "auc"
    assert main(["validate", str(path)]) == EXIT_OK
    bad = write_scenario(tmp_path / "bad.yaml", good.replace("rank_by: auc", "rank_by: success_rate"))
    assert main(["validate", str(bad)]) == EXIT_INPUT
    assert "rank_by: unknown metric 'success_rate'" in capsys.readouterr().err


def test_bootstrap_draws_are_the_games_resample_seeded_by_the_matchup_key(tmp_path) -> None:
    store = make_run(tmp_path / "run", n_out=200)
    (board,) = leaderboard.build(store.results(), arrays=saved_arrays(store), resamples=300)
    cell = [r for r in store.results() if r["defense_label"] == "nonprivate" and r["attack"] == "lira"]
    arrays = saved_arrays(store)
    draws = [resample(arrays(r["key"]), ["auc"], resamples=300, seed=resample_seed(r["key"]))["auc"] for r in cell]
    low, high = np.quantile(np.mean(draws, axis=0), [0.025, 0.975])
    iv = board.grids["auc"].intervals["nonprivate", "lira"]
    assert (iv.method, iv.low, iv.high) == ("bootstrap", pytest.approx(low), pytest.approx(high))
    # The resample's seed is the matchup's (and the board's), not the order of work.
    (again,) = leaderboard.build(store.results()[::-1], arrays=saved_arrays(store), resamples=300)
    assert again.grids["auc"].intervals["nonprivate", "lira"] == iv
    (other,) = leaderboard.build(store.results(), arrays=saved_arrays(store), resamples=300, seed=1)
    assert other.grids["auc"].intervals["nonprivate", "lira"] != iv


def test_rows_of_a_game_no_longer_registered_are_read_from_their_own_columns_without_intervals(tmp_path) -> None:
    """A game whose plugin is gone: its rows still say how to rank and read them; nothing resamples its scores, so
    its 2-seed cells get no interval, and the header says why."""
    store = make_run(tmp_path / "run", game="uninstalled-game")
    (board,) = leaderboard.build(store.results(), arrays=saved_arrays(store))
    assert board.game == "uninstalled-game" and board.metric == "tpr@1%fpr" and board.beside == ("auc",)
    assert all(iv.method == "none" for g in board.grids.values() for iv in g.intervals.values())
    assert "game 'uninstalled-game' is not registered" in board.interval_method


def test_rows_written_before_they_named_their_metrics_fall_back_to_the_registered_game(tmp_path) -> None:
    store = make_run(tmp_path / "run", metric_info_rows=False)
    rows = store.results()
    assert not any("primary_metric" in r or "metric_info" in r for r in rows)
    (board,) = leaderboard.build(rows, arrays=saved_arrays(store))
    assert board.metric == "tpr@1%fpr" and board.beside == ("auc",)
    assert board.grids["auc"].info.bounds == (0.0, 1.0)  # from the registry's declaration
    assert board.intervals["nonprivate", "lira"].method == "bootstrap"


def test_a_metric_the_game_cannot_resample_says_so() -> None:
    from tests.results.test_leaderboard import ROWS

    (board,) = leaderboard.build(ROWS, rank_by="auc")
    assert "no saved scores were given to resample" in board.interval_method
    (board,) = leaderboard.build(ROWS, rank_by="auc", arrays=lambda key: None)
    assert "no saved scores to resample" in board.interval_method
    rows = [{**r, "metrics": {"balanced_accuracy": r["metrics"].get("auc")} if r["metrics"] else {}} for r in ROWS]
    (board,) = leaderboard.build(rows, arrays=lambda key: {"scores": np.arange(4.0), "is_member": np.r_[1, 1, 0, 0]})
    assert board.metric == "balanced_accuracy"
    assert "balanced_accuracy cannot be recomputed from saved scores" in board.interval_method


def test_every_tpr_at_fpr_carries_its_operating_point_in_the_rows_the_frame_and_every_format(tmp_path) -> None:
    store = make_run(tmp_path / "run")
    rows = store.results()
    for r in rows:  # the row: one operating point for each TPR@FPR that is a number
        numbers = {k for k, v in r["metrics"].items() if k.startswith("tpr@") and v is not None}
        assert set(r["operating_points"]) == numbers
        assert set(r["operating_points"]) == {"tpr@10%fpr", "tpr@1%fpr"}  # 100 non-members: not 0.1 %
    (board,) = leaderboard.build(rows, arrays=saved_arrays(store))
    grid = board.grids["tpr@1%fpr"]
    cell = [r for r in rows if (r["defense_label"], r["attack_label"]) == ("nonprivate", "lira")]
    point = grid.points["nonprivate", "lira"]  # pooled over the two seeds, thresholds in seed order
    by_seed = [r["operating_points"]["tpr@1%fpr"] for r in sorted(cell, key=lambda r: r["seed"])]
    assert point.thresholds == tuple(p["threshold"] for p in by_seed)
    assert point.false_positives == sum(p["false_positives"] for p in by_seed) <= 2 and point.nonmembers == 200
    assert point.fpr == point.false_positives / 200
    assert set(grid.points) == {(d, a) for d in board.means.index for a in board.means.columns}
    assert not board.grids["tpr@0.1%fpr"].points and not board.grids["auc"].points
    # the frame (the API's and the CSV's records)
    frame = pd.DataFrame(leaderboard.long_rows([board])).set_index(["defense", "attack"])
    rec = frame.loc[("nonprivate", "lira")]
    assert rec["tpr@1%fpr_thresholds"] == list(point.thresholds)
    assert rec["tpr@1%fpr_false_positives"] == point.false_positives and rec["tpr@1%fpr_nonmembers"] == 200
    assert rec["tpr@1%fpr_fpr"] == point.fpr and rec["tpr@1%fpr_operating_point"] == point.text()
    assert point.text().startswith("thr ") and f"{point.false_positives} FP / 200 over 2 seeds" in point.text()
    assert "tpr@0.1%fpr_thresholds" not in frame.columns and "auc_thresholds" not in frame.columns
    records = list(csv.DictReader(io.StringIO(leaderboard.render_csv([board]))))
    assert all(json.loads(r["tpr@10%fpr_thresholds"]) and r["tpr@1%fpr_operating_point"] for r in records)
    data = json.loads(leaderboard.render_json([board]))[0]
    assert data["operating_points"]["tpr@1%fpr"]["nonprivate"]["lira"]["false_positives"] == point.false_positives
    text = leaderboard.render_table([board])
    assert "operating points (score ≥ thr is called a member" in text and point.text() in text


def test_a_single_seeds_operating_point_reads_as_the_row_says() -> None:
    from arena.results.leaderboard import OperatingPoint

    one = OperatingPoint.pooled([{"threshold": 2.3125, "fpr": 6 / 650, "false_positives": 6, "nonmembers": 650,
                                  "true_positives": 34, "members": 500}])
    assert one.text() == "thr 2.312, FPR 0.92 %, 6 FP / 650"
    none = OperatingPoint.pooled([{"threshold": None, "fpr": 0.0, "false_positives": 0, "nonmembers": 650,
                                   "true_positives": 0, "members": 500}])
    assert none.text() == "none called member, FPR 0.00 %, 0 FP / 650"
