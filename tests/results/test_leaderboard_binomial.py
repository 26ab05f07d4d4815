"""A proportion of independent trials (a reconstruction success rate over its targets) gets the exact binomial
interval over the trials pooled across seeds (Clopper–Pearson, ``arena.privacy.binomial``), whatever the number of
seeds: two seeds that agree, or a rate of 0, never give a zero-width interval; its coverage is at least its level."""

from __future__ import annotations

import numpy as np
import pytest

from arena.pipeline.execute import game_columns
from arena.pipeline.rowvalues import value_problem
from arena.privacy.binomial import clopper_pearson
from arena.results import leaderboard
from arena.results.leaderboard import binomial_interval, cell_interval

COLUMNS = {"metric_info": {"success_rate": {"higher_is_better": True, "bounds": [0.0, 1.0], "trials": "n_targets"},
                           "mse_mean": {"higher_is_better": False, "bounds": [0.0, None]}},
           "primary_metric": "success_rate", "rank_metric": "success_rate"}
"""How a reconstruction row reads its metrics (``test_rows_say_which_metric_counts_a_proportions_trials``)."""


def recon_rows(rates: dict[str, list[float]], n_targets: int = 100) -> list[dict]:
    """Reconstruction rows as a run writes them, one per seed."""
    rows = []
    for d, per_seed in rates.items():
        for seed, rate in enumerate(per_seed):
            rows.append({"key": f"{d}-{seed}", "scenario": "s", "track": "recon", "game": "reconstruction",
                         "defense": d.split("(")[0], "defense_label": d, "epsilon": 8.0 if "eps" in d else None,
                         "attack": "reconn", "attack_label": "reconn", "seed": seed, "status": "ok", "utility": 0.9,
                         "metrics": {"success_rate": rate, "mse_mean": 0.1, "n_targets": n_targets},
                         "notes": [], "claim": None, "error": None, **COLUMNS})
    return rows


@pytest.mark.slow  # loads the plugins
def test_rows_say_which_metric_counts_a_proportions_trials() -> None:
    columns = game_columns("reconstruction")
    info = columns["metric_info"]
    assert info["success_rate"]["trials"] == "n_targets" and "trials" not in info["mse_mean"]
    assert all(columns[k] == COLUMNS[k] for k in ("primary_metric", "rank_metric"))
    assert all(info[m] == COLUMNS["metric_info"][m] for m in COLUMNS["metric_info"])
    row = recon_rows({"nonprivate": [0.5]})[0]
    assert value_problem(row) is None
    row["metric_info"] = {**row["metric_info"], "success_rate": {**info["success_rate"], "trials": 3}}
    assert value_problem(row) == "'metric_info.success_rate.trials' is not a metric's name"


def test_two_equal_seeds_and_a_zero_rate_get_the_pooled_clopper_pearson_interval() -> None:
    (board,) = leaderboard.build(recon_rows({"nonprivate": [0.85, 0.85], "dpsgd(eps=8)": [0.0, 0.0]}))
    assert board.metric == "success_rate"
    hit = board.intervals["nonprivate", "reconn"]
    low, high = clopper_pearson(170, 200)
    assert (hit.method, hit.mean, hit.low, hit.high) == ("binomial", 0.85, float(low), float(high))
    assert hit.low < 0.85 < hit.high and hit.text() != "[0.850, 0.850]"
    zero = board.intervals["dpsgd(eps=8)", "reconn"]
    assert zero.low == 0.0 and zero.high == pytest.approx(float(clopper_pearson(0, 200)[1])) and zero.high > 0.01
    assert "Clopper–Pearson" in board.interval_method and "(n_targets) pooled across seeds" in board.interval_method
    assert board.grids["mse_mean"].intervals["nonprivate", "reconn"].method == "none"  # not a proportion


def test_five_or_more_seeds_stay_binomial_never_a_t_interval_of_equal_seeds() -> None:
    (board,) = leaderboard.build(recon_rows({"nonprivate": [0.4] * 6}, n_targets=50))
    iv = board.intervals["nonprivate", "reconn"]
    assert iv.method == "binomial" and iv.n == 6 and iv.high - iv.low > 0.1
    assert cell_interval([0.4] * 6, None, (0.0, 1.0)).method == "t"  # what a metric without trials gets


def test_a_row_without_its_trial_count_falls_back_to_the_seed_rules() -> None:
    rows = recon_rows({"nonprivate": [0.5, 0.6]})
    del rows[1]["metrics"]["n_targets"]
    (board,) = leaderboard.build(rows)
    assert board.intervals["nonprivate", "reconn"].method == "none"


def test_pooled_binomial_intervals_cover_at_their_level_and_separate_rates_that_differ() -> None:
    """Coverage (1 − the false-positive rate of 'p is outside') at least 95 % for 2 seeds of 40 targets, and power:
    a true rate of 0.3 against 0.5 is told apart almost always."""
    rng = np.random.default_rng(7)
    p, seeds, n, reps = 0.3, 2, 40, 800
    hits = rng.binomial(n, p, size=(reps, seeds))
    intervals = [binomial_interval(list(h / n), [n] * seeds) for h in hits]
    coverage = np.mean([iv.low <= p <= iv.high for iv in intervals])
    power = np.mean([iv.high < 0.5 for iv in intervals])
    assert coverage >= 0.95 and coverage < 0.995  # exact, hence conservative, yet not vacuous
    assert power > 0.9
