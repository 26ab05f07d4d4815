"""Leaderboard additions the report relies on: t-intervals over seeds (from 5 seeds on, none from fewer without
bootstrap draws), ties as ties, DP violations marked."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from arena.results import leaderboard
from arena.results.leaderboard import mean_interval


def test_mean_interval_is_the_student_t_interval_of_the_mean() -> None:
    # [1, 2, 3]: mean 2, s = 1, t(0.975, 2) = 4.302653 → half-width 4.302653/√3 = 2.484138.
    iv = mean_interval([1.0, 2.0, 3.0])
    assert (iv.mean, iv.n) == (2.0, 3)
    assert (iv.low, iv.high) == (pytest.approx(2 - 2.484138, abs=1e-6), pytest.approx(2 + 2.484138, abs=1e-6))
    assert iv.text() == "[-0.484, 4.484]"
    one = mean_interval([0.5])
    assert math.isnan(one.low) and one.text() == "one seed: no interval"


def test_mean_interval_is_scipy_stats_t_interval_bit_for_bit_without_importing_it() -> None:
    from scipy.stats import t

    for values in ([0.1, 0.4], [1.0, 2.0, 4.0, 8.0, 16.0], list(np.linspace(0, 1, 30) ** 2)):
        arr = np.asarray(values)
        half = float(t.ppf(0.975, len(arr) - 1) * arr.std(ddof=1) / math.sqrt(len(arr)))
        iv = mean_interval(values)
        assert (iv.low, iv.high) == (float(arr.mean()) - half, float(arr.mean()) + half)


def test_mean_interval_is_cut_to_the_metric_range() -> None:
    # AUCs 0.9 and 1.0: mean 0.95, s = 0.0707, t(0.975, 1) = 12.706 → raw interval [0.315, 1.585].
    iv = mean_interval([0.9, 1.0], bounds=(0.0, 1.0))
    assert iv.low == pytest.approx(0.95 - 12.7062 * 0.070711 / math.sqrt(2), abs=1e-3)
    assert iv.high == 1.0 and iv.text() == "[0.315, 1.000]"


def row(key: str, defense: str, attack: str, seed: int, auc: float) -> dict:
    return {"key": key, "track": "t", "game": "membership", "defense": defense, "defense_label": defense,
            "epsilon": None, "attack": attack, "attack_label": attack, "seed": seed, "status": "ok",
            "utility": 0.8 + 0.1 * seed,
            "metrics": {"auc": auc}, "error": None}


def rows() -> list[dict]:
    out = []
    for seed in (0, 1):
        out.append(row(f"a-x-{seed}", "nonprivate", "attack-a", seed, 0.7))
        out.append(row(f"b-x-{seed}", "nonprivate", "attack-b", seed, 0.7))  # tied with attack-a
        out.append(row(f"c-x-{seed}", "nonprivate", "attack-c", seed, 0.6 + 0.02 * seed))
    return out


def test_equal_means_share_a_place_and_cells_carry_intervals() -> None:
    (board,) = leaderboard.build(rows())
    places = board.attack_ranking["place"].to_dict()
    assert places == {"attack-a": 1, "attack-b": 1, "attack-c": 3}
    assert board.intervals["nonprivate", "attack-c"].mean == pytest.approx(0.61)
    assert board.utility_intervals["nonprivate"].mean == pytest.approx(0.85)  # one utility per seed, not per row
    # Utility 0.8 and 0.9: a t-interval from 2 seeds would be 0.85 ± 0.635 ([0.215, 1.000]): no measurement, so
    # none is given (below 5 seeds, no bootstrap draws) and the table says why.
    table = leaderboard.render_table([board])
    assert "[0.215, 1.000]" not in table and "no interval (2 seeds)" in table
    assert "no interval where a cell has fewer than 5 seeds (too few for a t-interval)" in table
    five = [row(f"c-x-{s}", "nonprivate", "attack-c", s, 0.6 + 0.02 * s) for s in range(5)]
    (board5,) = leaderboard.build(five)  # from 5 seeds on: the t-interval over seeds
    assert board5.intervals["nonprivate", "attack-c"].method == "t"
    assert "95% t-intervals of the means over seeds (5 seeds)" in leaderboard.render_table([board5])


def test_violations_are_marked_in_the_cell_listed_and_exported() -> None:
    findings = {"c-x-1": "empirical ε ≥ 2.000 > claimed ε = 1.000"}
    (board,) = leaderboard.build(rows(), findings)
    assert board.cells.loc["nonprivate", "attack-c"].endswith("VIOLATION×1")
    assert board.violations == ["t nonprivate vs attack-c seed 1: empirical ε ≥ 2.000 > claimed ε = 1.000"]
    assert "DP VIOLATIONS" in leaderboard.render_table([board])
    assert "VIOLATION×1" in leaderboard.render_csv([board])
    exported = json.loads(leaderboard.render_json([board]))[0]
    assert exported["violations"] == board.violations
    assert exported["intervals"]["nonprivate"]["attack-c"] == [None, None]  # 2 seeds, no draws: no interval
