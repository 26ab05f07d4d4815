"""The leaderboard's metrics: ranked by TPR at 1% FPR with AUC beside it, every metric exported with its interval,
bootstrap intervals over challenge points below five seeds, n/r where the non-members cannot resolve an FPR."""

from __future__ import annotations

import csv
import io
import json
import zlib

import numpy as np
import pytest
import torch

from arena.cli import EXIT_INPUT, EXIT_OK, main
from arena.games.membership.metrics import membership_metrics
from arena.results import leaderboard
from arena.run.execute import metric_info
from arena.run.store import RunStore


def test_vectorised_score_metrics_equal_the_games_sklearn_metrics() -> None:
    rng = np.random.default_rng(1)
    for n_in, n_out in ((50, 50), (120, 300)):
        member = np.r_[np.ones(n_in, bool), np.zeros(n_out, bool)]
        scores = np.round(rng.normal(size=n_in + n_out) + 0.7 * member, 1)  # many ties
        expected, _ = membership_metrics(scores, member, scores > 0)
        got = leaderboard.score_metrics(scores[None], member, (0.1, 0.01))
        for name in ("auc", "advantage", "tpr@10%fpr", "tpr@1%fpr"):
            if expected[name] is not None:
                assert got[name][0] == pytest.approx(expected[name]), name


def test_bootstrap_keeps_the_counts_and_is_seeded() -> None:
    member = np.r_[np.ones(100, bool), np.zeros(100, bool)]
    perfect = np.r_[np.full(100, 5.0), np.zeros(100)] + np.arange(200) * 1e-3
    draws = leaderboard.bootstrap_metrics(perfect, member, ["auc", "tpr@1%fpr"], resamples=200, seed=3)
    # Stratified: every resample still has members and non-members, so a perfect separation stays perfect.
    assert np.all(draws["auc"] == 1.0) and np.all(draws["tpr@1%fpr"] == 1.0)
    noisy = np.random.default_rng(0).normal(size=200) + member
    a = leaderboard.bootstrap_metrics(noisy, member, ["auc"], resamples=300, seed=7)["auc"]
    b = leaderboard.bootstrap_metrics(noisy, member, ["auc"], resamples=300, seed=7)["auc"]
    assert np.array_equal(a, b) and a.std() > 0.01


def make_run(root, seeds=(0, 1), n_out=100, shift=1.0, metric_info_rows=True) -> RunStore:
    """Two defenses × two attacks, ``n_out`` non-members, scores saved as a real run saves them."""
    store = RunStore(root)
    info = metric_info("membership") if metric_info_rows else None
    for d, strength in (("nonprivate", shift), ("dpsgd(eps=1)", shift / 4)):
        for a, factor in (("loss", 1.0), ("lira", 2.0)):
            for seed in seeds:
                key = f"{d}-{a}-{seed}"
                rng = np.random.default_rng(zlib.crc32(key.encode()))
                member = np.r_[np.ones(100, np.int8), np.zeros(n_out, np.int8)]
                scores = rng.normal(size=100 + n_out) + strength * factor * member
                metrics, notes = membership_metrics(scores, member, scores > 0.5)
                store.save_arrays(key, {"scores": torch.from_numpy(scores), "is_member": torch.from_numpy(member)})
                row = {"key": key, "scenario": "s", "track": "t", "game": "membership",
                       "defense": d.split("(")[0], "defense_label": d, "epsilon": 1.0 if "eps" in d else None,
                       "attack": a, "attack_label": a, "seed": seed, "status": "ok", "utility": 0.9,
                       "metrics": metrics, "notes": notes, "claim": None, "error": None}
                if info is not None:
                    row["metric_info"] = info
                store.append_result(row)
    return store


def test_membership_is_ranked_by_tpr_at_1pct_with_auc_beside_and_bootstrap_below_5_seeds(tmp_path) -> None:
    store = make_run(tmp_path / "run")
    rows = store.results()
    from arena.results.audit import saved_arrays

    (board,) = leaderboard.build(rows, arrays=saved_arrays(store))
    assert board.metric == "tpr@1%fpr" and board.beside == ("auc",)
    assert board.interval_method.startswith("95% intervals: percentile bootstrap over challenge points")
    iv = board.intervals["nonprivate", "lira"]
    assert iv.method == "bootstrap" and iv.low <= iv.mean <= iv.high
    (t_board,) = leaderboard.build(rows)  # no scores to resample: t over seeds, and the header says so
    assert t_board.interval_method.startswith("95% t-intervals") and "no saved scores" in t_board.interval_method
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
    assert "warning: t: tpr@1%fpr cannot be resolved" in text
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
