"""A track's two rankings: attacks by their mean rank across defenses (1 = strongest), defenses by utility against
the worst case over attacks, with the Pareto front marked."""

from __future__ import annotations

import numpy as np
import pandas as pd


def rankings(means: pd.DataFrame, utility: pd.Series, metric: str, higher: bool,
             defenses: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(attack ranking, defense ranking) from the cell means of the ranking ``metric``."""
    # Attacks: rank within each defense (1 = strongest), ties share the average rank.
    rank_frame = (means.reindex(defenses) * (-1 if higher else 1)).rank(axis=1, method="average")
    rank_frame = rank_frame.dropna(how="all").dropna(axis=1, how="all")  # defenses and attacks with a mean
    attack_ranking = pd.DataFrame(
        {"mean_rank": rank_frame.mean(), "defenses": rank_frame.count()}
    ).sort_values("mean_rank") if len(rank_frame) else pd.DataFrame(columns=["mean_rank", "defenses"])
    # Equal mean ranks are a tie and share the better place.
    attack_ranking.insert(0, "place", attack_ranking["mean_rank"].rank(method="min").astype(int))
    # Defenses: utility against the worst case over attacks (for the defender).
    worst = means.max(axis=1) if higher else means.min(axis=1)
    defense_ranking = pd.DataFrame({"utility": utility, f"worst_{metric}": worst})
    defense_ranking["pareto"] = [
        on_front(d, defense_ranking, f"worst_{metric}", higher) for d in defense_ranking.index
    ]
    leak = defense_ranking[f"worst_{metric}"] * (1 if higher else -1)
    order = defense_ranking.assign(_leak=leak).sort_values(["_leak", "utility"], ascending=[True, False]).index
    return attack_ranking, defense_ranking.loc[order]


def on_front(d: str, frame: pd.DataFrame, worst_col: str, higher: bool) -> bool:
    """No other defense is at least as useful and at most as leaky, and strictly better in one of them."""
    u, w = frame.loc[d, "utility"], frame.loc[d, worst_col]
    if np.isnan(u) or np.isnan(w):
        return False
    leak = (lambda x: x) if higher else (lambda x: -x)
    for other in frame.index:
        if other == d:
            continue
        u2, w2 = frame.loc[other, "utility"], frame.loc[other, worst_col]
        if np.isnan(u2) or np.isnan(w2):
            continue
        if u2 >= u and leak(w2) <= leak(w) and (u2 > u or leak(w2) < leak(w)):
            return False
    return True
