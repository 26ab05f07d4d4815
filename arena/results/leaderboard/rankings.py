"""A track's two rankings: attacks by their mean rank across defenses (1 = strongest), defenses by their worst case
over attacks with intervals, utility beside it, the Pareto front marked.

The worst case of a defense is a maximum (for the attacker) over noisy estimates, and the largest of several noisy
estimates is biased upward: ranking defenses by ``max`` of the cell means lets one attack's lucky cell decide
(DP-SGD at ε = 2 below ε = 8 because of one threshold-attack cell). The rule here respects the intervals:

* each cell's interval is made simultaneous over the track's k attacks (Bonferroni: each at level 1 − α/k, α =
  0.05; ``board.track_board`` computes them), so that, with probability ≥ 95 %, every true value of a defense lies
  in its interval at once, and then so does their maximum: the **worst-case interval** of a defense is
  [max over attacks of the lower ends, max over attacks of the upper ends] (for the attacker's direction);
* ``worst_attack`` is the attack whose estimate is highest, ``worst_<metric>`` that estimate; ``indistinguishable``
  names the other attacks that the intervals cannot tell from the worst (upper end at or above the worst-case
  lower end: any of them may be the true worst);
* defense e ranks ahead of defense d only when e's worst-case interval lies wholly below d's (e's upper end below
  d's lower end); ``place`` is 1 + the number of defenses ranked ahead, so defenses whose worst cases overlap share
  a place, and the table is ordered by place, then by utility (the defender's other axis), then by the estimate;
* a cell without an interval (too few seeds and no bootstrap draws) counts as its estimate alone, both ends.

The Pareto front stays on the estimates (utility against ``worst_<metric>``), found by one sort.

``dominated_by`` compares each defense without a privacy claim with the track's DP baselines (the configurations
whose releases claim an ε: DP-SGD at each ε, output perturbation), as Aerni, Zhang & Tramèr (2024) do: a defense is
dominated by a baseline that has at least its utility and whose worst-case interval lies wholly at or below the
defense's (the baseline's upper end at most the defense's lower end, both simultaneous intervals): with 95 %
confidence the baseline leaks no more under the strongest attack played, at no loss of utility. Among several, the
most useful baseline is named.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from arena.results.leaderboard.intervals import Interval

ALPHA = 0.05
"""The family-wise error rate of the worst-case intervals."""


def simultaneous_confidence(n_attacks: int) -> float:
    """The per-cell level that makes ``n_attacks`` cells' intervals simultaneous at 1 − ``ALPHA`` (Bonferroni)."""
    return 1 - ALPHA / max(1, n_attacks)


def rankings(means: pd.DataFrame, utility: pd.Series, metric: str, higher: bool, defenses: list[str],
             intervals: Mapping[tuple[str, str], Interval] | None = None,
             baselines: frozenset[str] = frozenset()) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(attack ranking, defense ranking) from the cell means of the ranking ``metric`` and the cells' simultaneous
    ``intervals`` (defense, attack) → ``Interval`` (none given: every cell counts as its estimate); ``baselines``:
    the defenses with a DP claim, which the others are compared with (``dominated_by``)."""
    # Attacks: rank within each defense (1 = strongest), ties share the average rank.
    rank_frame = (means.reindex(defenses) * (-1 if higher else 1)).rank(axis=1, method="average")
    rank_frame = rank_frame.dropna(how="all").dropna(axis=1, how="all")  # defenses and attacks with a mean
    attack_ranking = pd.DataFrame(
        {"mean_rank": rank_frame.mean(), "defenses": rank_frame.count()}
    ).sort_values("mean_rank") if len(rank_frame) else pd.DataFrame(columns=["mean_rank", "defenses"])
    # Equal mean ranks are a tie and share the better place.
    attack_ranking.insert(0, "place", attack_ranking["mean_rank"].rank(method="min").astype(int))
    return attack_ranking, defense_ranking(means, utility, metric, higher, intervals or {}, baselines)


def _worst(means: pd.Series, defense: str, sign: float,
           intervals: Mapping[tuple[str, str], Interval]) -> tuple[float, float, float, str | None, list[str]]:
    """One defense's worst case in the attacker's orientation (``sign`` · value: higher leaks more): (estimate,
    lower end, upper end, worst attack, the attacks indistinguishable from it)."""
    values = means.dropna()
    if values.empty:
        return np.nan, np.nan, np.nan, None, []
    leak = values * sign
    lows, highs = {}, {}
    for a, v in leak.items():
        iv = intervals.get((defense, a))
        if iv is None or not (np.isfinite(iv.low) and np.isfinite(iv.high)):
            lows[a] = highs[a] = v  # no interval: the estimate alone
        else:
            lows[a], highs[a] = sorted((sign * iv.low, sign * iv.high))
    worst = str(leak.idxmax())  # the first attack of the highest estimate
    low = max(lows.values())
    tied = [str(a) for a in leak.sort_values(ascending=False, kind="stable").index if a != worst and highs[a] >= low]
    return float(leak[worst]), float(low), float(max(highs.values())), worst, tied


def defense_ranking(means: pd.DataFrame, utility: pd.Series, metric: str, higher: bool,
                    intervals: Mapping[tuple[str, str], Interval],
                    baselines: frozenset[str] = frozenset()) -> pd.DataFrame:
    """Per defense (rows of ``means``): ``place``, ``utility``, ``worst_<metric>`` (the highest estimate over
    attacks, for the attacker), ``worst_<metric>_low`` and ``_high`` (the worst-case interval), ``worst_attack``,
    ``indistinguishable`` (comma-separated), ``pareto`` and ``dominated_by`` (a DP baseline of ``baselines``
    dominating it, or ""); ordered by place, then utility (descending), then the
    estimate (the rule: this module's docstring)."""
    sign = 1.0 if higher else -1.0
    found = {d: _worst(means.loc[d], d, sign, intervals) for d in means.index}
    est = pd.Series({d: f[0] for d, f in found.items()}, dtype=np.float64)
    low = pd.Series({d: f[1] for d, f in found.items()}, dtype=np.float64)
    high = pd.Series({d: f[2] for d, f in found.items()}, dtype=np.float64)
    # e ahead of d: e's upper end below d's lower end; place = 1 + the number ahead (sorted upper ends: O(n log n))
    uppers = np.sort(high.dropna().to_numpy())
    place = pd.Series({d: (1 + int(np.searchsorted(uppers, low[d], side="left"))) if np.isfinite(low[d]) else np.nan
                       for d in means.index}, dtype=np.float64)
    frame = pd.DataFrame({
        "place": pd.Series([None if np.isnan(v) else int(v) for v in place], index=place.index, dtype=object),
        "utility": utility.reindex(means.index),
        f"worst_{metric}": est * sign,
        # in the metric's own orientation: for a lower-is-better metric the ends swap
        f"worst_{metric}_low": (low if higher else -high) * 1.0,
        f"worst_{metric}_high": (high if higher else -low) * 1.0,
        "worst_attack": pd.Series({d: f[3] or "" for d, f in found.items()}),
        "indistinguishable": pd.Series({d: ", ".join(f[4]) for d, f in found.items()}),
    })
    frame["pareto"] = pareto_front(frame["utility"], est)
    frame["dominated_by"] = dominated_by(frame["utility"], low, high, baselines)
    order = frame.assign(_place=place.fillna(np.inf), _u=-frame["utility"].fillna(-np.inf), _e=est.fillna(np.inf))
    order = order.sort_values(["_place", "_u", "_e"], kind="stable").index
    return frame.loc[order]


def pareto_front(utility: pd.Series, leak: pd.Series) -> pd.Series:
    """Whether each defense is on the front: no other is at least as useful and at most as leaky (``leak``, in the
    attacker's orientation), and strictly better in one of them; one sort (O(n log n)), not a pairwise loop. A
    defense without a utility or an estimate is off it."""
    u = utility.reindex(leak.index).to_numpy(dtype=np.float64)
    w = leak.to_numpy(dtype=np.float64)
    on = np.zeros(len(w), dtype=bool)
    ok = np.flatnonzero(np.isfinite(u) & np.isfinite(w))
    order = ok[np.lexsort((-u[ok], w[ok]))]  # by leak ascending, then utility descending
    best_before = -np.inf  # the highest utility among strictly less leaky defenses
    i = 0
    while i < len(order):
        j = i
        while j < len(order) and w[order[j]] == w[order[i]]:
            j += 1
        group = order[i:j]  # equally leaky; the first has the group's highest utility
        top = u[group[0]]
        for k in group:
            on[k] = u[k] > best_before and u[k] == top
        best_before = max(best_before, top)
        i = j
    return pd.Series(on, index=leak.index)


def dominated_by(utility: pd.Series, low: pd.Series, high: pd.Series, baselines: frozenset[str]) -> pd.Series:
    """Per defense outside ``baselines``: the most useful baseline with at least its utility whose worst-case upper
    end (attacker's orientation) is at most the defense's lower end, or ""; baselines themselves get "". Sorting
    the baselines by utility makes it one pass over them per defense (few baselines: DP configurations)."""
    u = utility.reindex(low.index)
    base = sorted((b for b in baselines if b in low.index and np.isfinite(u[b]) and np.isfinite(high[b])),
                  key=lambda b: -u[b])
    out = {}
    for d in low.index:
        out[d] = "" if d in baselines or not (np.isfinite(u[d]) and np.isfinite(low[d])) else next(
            (b for b in base if u[b] >= u[d] and high[b] <= low[d]), "")
    return pd.Series(out, dtype=object)
