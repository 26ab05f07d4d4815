"""The defense ranking respects intervals: the worst case over attacks is an interval made simultaneous over the
attacks (Bonferroni), defenses are ranked apart only when their worst-case intervals are, the worst attack is named
with those the intervals cannot tell from it; the Pareto front is the pairwise definition, found by one sort."""

from __future__ import annotations

import itertools
import zlib

import numpy as np
import pandas as pd
import pytest
import torch

from arena.games.membership.metrics import membership_scores
from arena.pipeline.execute import game_columns
from arena.pipeline.store import RunStore
from arena.results import leaderboard
from arena.results.audit import saved_arrays
from arena.results.leaderboard.rankings import dominated_by, pareto_front, simultaneous_confidence

N = 1000  # members and non-members each: TPR at 1 % FPR resolvable, and noisy


def simulated(root, shifts: dict[tuple[str, str], float], salt: int = 0) -> RunStore:
    """One seed per (defense, attack): members' scores shifted by ``shifts[d, a]`` (the true leakage), the rows and
    saved scores as a run writes them."""
    store = RunStore(root)
    columns = game_columns("membership")
    for (d, a), shift in shifts.items():
        key = f"{d}-{a}"
        rng = np.random.default_rng([zlib.crc32(key.encode()), salt])
        member = np.r_[np.ones(N, np.int8), np.zeros(N, np.int8)]
        scores = rng.normal(size=2 * N) + shift * member
        metrics, notes, points = membership_scores(scores, member, scores > 0.5)
        store.save_arrays(key, {"scores": torch.from_numpy(scores), "is_member": torch.from_numpy(member)})
        store.append_result({"key": key, "scenario": "s", "track": "t", "game": "membership",
                             "defense": d.split("(")[0], "defense_label": d, "epsilon": None, "attack": a,
                             "attack_label": a, "seed": 0, "status": "ok", "utility": 0.8, "metrics": metrics,
                             "operating_points": points, "notes": notes, "claim": None, "error": None, **columns})
    return store


ATTACKS = ("loss", "threshold", "lira")


@pytest.mark.slow
def test_noise_alone_does_not_rank_two_equally_leaky_defenses_apart(tmp_path) -> None:
    # Both defenses leak alike under every attack; find a draw where noise puts one cell of eps=2 on top, so that
    # the maximum of the estimates ranks eps=2 below eps=8.
    shifts = {(d, a): 1.0 for d in ("dpsgd(eps=2)", "dpsgd(eps=8)") for a in ATTACKS}
    for salt in itertools.count():
        store = simulated(tmp_path / f"run{salt}", shifts, salt)
        (board,) = leaderboard.build(store.results(), arrays=saved_arrays(store))
        naive = board.means.max(axis=1)
        if naive["dpsgd(eps=2)"] > naive["dpsgd(eps=8)"] + 0.01:
            break
        assert salt < 20, "no draw in 20 where noise separates the two"
    ranking = board.defense_ranking
    col = f"worst_{board.metric}"
    assert board.metric == "tpr@1%fpr"
    assert ranking[col].to_dict() == pytest.approx(naive.to_dict())  # the estimate is still the highest mean
    two, eight = ranking.loc["dpsgd(eps=2)"], ranking.loc["dpsgd(eps=8)"]
    assert two[f"{col}_low"] <= eight[f"{col}_high"] and eight[f"{col}_low"] <= two[f"{col}_high"]  # overlap
    assert two["place"] == eight["place"] == 1  # not ranked as different
    for d in ("dpsgd(eps=2)", "dpsgd(eps=8)"):  # the worst attack is named, the others cannot be told from it
        row = ranking.loc[d]
        assert row["worst_attack"] == board.means.loc[d].idxmax()
        assert set(row["indistinguishable"].split(", ")) == set(ATTACKS) - {row["worst_attack"]}
        assert row[f"{col}_low"] <= row[col] <= row[f"{col}_high"]


@pytest.mark.slow
def test_a_genuinely_worse_attack_is_named_and_ranks_its_defense_behind(tmp_path) -> None:
    shifts = {("dpsgd(eps=1)", a): 0.5 for a in ATTACKS} | {("nonprivate", a): 0.5 for a in ATTACKS}
    shifts["nonprivate", "lira"] = 3.0  # far above the others, whatever the noise
    store = simulated(tmp_path / "run", shifts)
    (board,) = leaderboard.build(store.results(), arrays=saved_arrays(store))
    ranking = board.defense_ranking
    col = f"worst_{board.metric}"
    assert ranking.loc["nonprivate", "worst_attack"] == "lira"
    assert ranking.loc["nonprivate", "indistinguishable"] == ""
    assert ranking.loc["nonprivate", f"{col}_low"] > ranking.loc["dpsgd(eps=1)", f"{col}_high"]
    assert list(ranking.index) == ["dpsgd(eps=1)", "nonprivate"]
    assert ranking["place"].to_dict() == {"dpsgd(eps=1)": 1, "nonprivate": 2}
    # the worst-case intervals are simultaneous over the three attacks: each cell's at 1 - 0.05/3, wider than 95 %
    assert simultaneous_confidence(3) == pytest.approx(1 - 0.05 / 3)
    worst_low, worst_high = ranking.loc["dpsgd(eps=1)", [f"{col}_low", f"{col}_high"]]
    at_95 = [board.intervals["dpsgd(eps=1)", a] for a in ATTACKS]
    assert {iv.method for iv in at_95} == {"bootstrap"}
    assert worst_low < max(iv.low for iv in at_95) and worst_high > max(iv.high for iv in at_95)


def test_the_pareto_front_by_one_sort_is_the_pairwise_definition() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 9))
        u = pd.Series(rng.integers(0, 4, n) / 4, index=[f"d{i}" for i in range(n)])  # many ties
        w = pd.Series(rng.integers(0, 4, n) / 4, index=u.index)
        if n > 2:
            u.iloc[0] = np.nan
        front = pareto_front(u, w)
        for d in u.index:
            dominated = any(u[e] >= u[d] and w[e] <= w[d] and (u[e] > u[d] or w[e] < w[d])
                            for e in u.index if e != d and not np.isnan(u[e]))
            assert front[d] == (not np.isnan(u[d]) and not dominated), (u.to_dict(), w.to_dict(), d)


def test_a_defense_is_dominated_by_a_dp_baseline_as_useful_whose_worst_case_lies_below() -> None:
    """Aerni et al.'s comparison: dominated_by names the most useful DP baseline with at least the defense's utility
    whose worst-case interval lies at or below the defense's; overlapping intervals or less utility do not count."""
    low = pd.Series({"emp": 0.40, "close": 0.10, "dp-hi": 0.05, "dp-lo": 0.01, "dp-useless": 0.0})
    high = pd.Series({"emp": 0.60, "close": 0.30, "dp-hi": 0.20, "dp-lo": 0.04, "dp-useless": 0.01})
    utility = pd.Series({"emp": 0.90, "close": 0.90, "dp-hi": 0.92, "dp-lo": 0.80, "dp-useless": 0.95})
    baselines = frozenset({"dp-hi", "dp-lo", "dp-useless"})
    found = dominated_by(utility, low, high, baselines)
    assert found["emp"] == "dp-useless", "the most useful baseline that dominates it"
    assert found["close"] == "dp-useless"
    assert all(found[b] == "" for b in baselines)
    without = dominated_by(utility, low, high, frozenset({"dp-hi", "dp-lo"}))
    assert without["emp"] == "dp-hi" and without["close"] == "", "dp-hi overlaps close's interval; dp-lo is less useful"
