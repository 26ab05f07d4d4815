"""The leaderboard: mean ± std over seeds of the ranking metric, rankings, failures marked, three formats; the
ranking and primary metric read from the rows (the registry only for rows written before they said)."""

from __future__ import annotations

import json

import pytest

from arena.results import leaderboard


def row(defense: str, attack: str, seed: int, auc: float | None, utility: float, status: str = "ok",
        eps: float | None = None) -> dict:
    return {
        "key": f"{defense}/{attack}/{seed}", "track": "t", "game": "membership", "defense": defense.split("(")[0],
        "defense_label": defense, "attack": attack, "attack_label": attack, "seed": seed, "status": status,
        "epsilon": eps, "utility": utility, "metrics": {} if auc is None else {"auc": auc},
        "error": "boom" if status == "failed" else None,
    }


ROWS = [
    row("nonprivate", "a", 0, 0.70, 0.90), row("nonprivate", "a", 1, 0.80, 0.92),
    row("nonprivate", "b", 0, 0.60, 0.90), row("nonprivate", "b", 1, 0.60, 0.92),
    row("dpsgd(eps=1)", "a", 0, 0.52, 0.50, eps=1), row("dpsgd(eps=1)", "a", 1, 0.50, 0.60, eps=1),
    row("dpsgd(eps=1)", "b", 0, 0.51, 0.50, eps=1), row("dpsgd(eps=1)", "b", 1, None, 0.60, "failed", eps=1),
    row("dpsgd(eps=8)", "a", 0, 0.75, 0.85, eps=8), row("dpsgd(eps=8)", "b", 0, 0.75, 0.85, eps=8),
]


def test_cells_are_means_with_sample_std() -> None:
    (board,) = leaderboard.build(ROWS)
    assert board.means.loc["nonprivate", "a"] == pytest.approx(0.75)
    assert board.cells.loc["nonprivate", "a"] == "0.750 ± 0.071 (n=2)"
    assert "FAILED×1" in board.cells.loc["dpsgd(eps=1)", "b"]
    assert board.failures == ["t dpsgd(eps=1) vs b seed 1: boom"]
    assert list(board.means.index) == ["nonprivate", "dpsgd(eps=8)", "dpsgd(eps=1)"]
    # one seed has no sample std: its cell says n = 1 and shows no "± 0.000"
    assert board.cells.loc["dpsgd(eps=8)", "a"] == "0.750 (n=1)"


def test_attack_ranking_counts_ties_as_ties() -> None:
    (board,) = leaderboard.build(ROWS)
    # nonprivate: a 0.75 > b 0.6; eps=1: a 0.51 > b 0.51? (0.51 vs 0.51 mean of a = 0.51) tie; eps=8: tie.
    ranks = board.attack_ranking["mean_rank"]
    assert ranks["a"] == pytest.approx((1 + 1.5 + 1.5) / 3)
    assert ranks["b"] == pytest.approx((2 + 1.5 + 1.5) / 3)


def test_defense_ranking_and_pareto_front() -> None:
    (board,) = leaderboard.build(ROWS)
    ranking = board.defense_ranking
    assert list(ranking.index) == ["dpsgd(eps=1)", "nonprivate", "dpsgd(eps=8)"]  # tie on 0.75 broken by utility
    assert ranking.loc["dpsgd(eps=8)", "worst_auc"] == pytest.approx(0.75)
    # eps=8 leaks as much as nonprivate (0.75 vs 0.75) with less utility: dominated.
    assert ranking["pareto"].to_dict() == {"dpsgd(eps=1)": True, "dpsgd(eps=8)": False, "nonprivate": True}


def test_a_rerun_row_replaces_the_failed_one() -> None:
    fixed = row("dpsgd(eps=1)", "b", 1, 0.49, 0.60, eps=1)
    (board,) = leaderboard.build([*ROWS, fixed])
    assert board.failures == [] and board.cells.loc["dpsgd(eps=1)", "b"].endswith("(n=2)")


def test_formats() -> None:
    boards = leaderboard.build(ROWS)
    text = leaderboard.render_table(boards)
    assert "higher = stronger attack" in text and "failed matchups:" in text
    csv = leaderboard.render_csv(boards).splitlines()
    assert csv[0].startswith("track,game,defense,attack,rank_by,seeds,interval") and len(csv) == 1 + 6
    assert "auc,auc_low,auc_high" in csv[0]  # every metric: mean and both ends of its interval
    data = json.loads(leaderboard.render_json(boards))
    assert data[0]["cells"]["nonprivate"]["a"] == pytest.approx(0.75)
    assert data[0]["higher_is_better"] is True


def test_the_ranking_metric_is_the_one_asked_for_then_the_games_rank_then_its_primary_one() -> None:
    game = leaderboard.GameMetrics(primary="auc", rank="tpr@1%fpr")
    assert leaderboard.rank_metric(["auc", "tpr@1%fpr", "x"], "x", game) == "x"
    assert leaderboard.rank_metric(["auc", "tpr@1%fpr", "x"], None, game) == "tpr@1%fpr"
    assert leaderboard.rank_metric(["auc", "x"], "missing", game) == "auc"
    assert leaderboard.rank_metric(["x", "y"], None, game) == "x"  # neither: the first metric present
    assert leaderboard.rank_metric([], None, game) == "auc"


def test_the_game_metrics_come_from_the_rows_and_the_registry_only_for_rows_without_them() -> None:
    assert leaderboard.game_metrics(ROWS) == leaderboard.GameMetrics("auc", "tpr@1%fpr")  # registered membership
    written = [{**r, "game": "gone", "primary_metric": "p", "rank_metric": None} for r in ROWS]
    assert leaderboard.game_metrics(written) == leaderboard.GameMetrics("p", "p")
    assert leaderboard.game_metrics([{**r, "game": "gone"} for r in ROWS]) == leaderboard.GameMetrics(None, None)


def test_arena_leaderboard_of_a_folder_without_results_is_exit_2_naming_it(tmp_path, capsys) -> None:
    from arena.cli import EXIT_INPUT, main

    (tmp_path / "empty").mkdir()
    assert main(["leaderboard", str(tmp_path / "absent"), str(tmp_path / "empty")]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert f"{tmp_path / 'absent'}: no results.jsonl here (not a directory)" in err
    assert f"{tmp_path / 'empty'}: no results.jsonl here" in err
