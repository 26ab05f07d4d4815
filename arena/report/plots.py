"""The report's figures as PNG bytes: heatmap, privacy-utility curves and log-log ROC curves of one track.

Figures are drawn on matplotlib's Agg canvas directly (no pyplot, no global state, no display needed).
"""

from __future__ import annotations

import io
import math
from collections.abc import Collection
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from sklearn.metrics import roc_curve

from arena.audit import ArrayLoader
from arena.leaderboard import TrackBoard


def text(s: object) -> str:
    """A plugin-supplied string made literal for matplotlib (a '$' would otherwise start mathtext)."""
    return str(s).replace("\\", "\\\\").replace("$", r"\$")


def png(fig: Figure) -> bytes:
    """Render ``fig`` on an Agg canvas to PNG bytes."""
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


def heatmap(board: TrackBoard, flagged: Collection[tuple[str, str]] = ()) -> bytes:
    """Defense × attack grid of the primary metric's mean over seeds; darker = stronger attack.

    Cells in ``flagged`` ((defense label, attack) pairs the DP audit flags) are outlined and marked.
    """
    means = board.means.to_numpy(dtype=np.float64)
    defenses, attacks = list(board.means.index), list(board.means.columns)
    fig = Figure(figsize=(1.6 + 1.5 * len(attacks), 1.2 + 0.5 * len(defenses)))
    ax = fig.add_subplot()
    finite = means[np.isfinite(means)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if hi - lo < 1e-9:
        lo, hi = lo - 0.05, hi + 0.05
    image = ax.imshow(np.ma.masked_invalid(means), cmap="Reds" if board.higher_is_better else "Reds_r",
                      vmin=lo, vmax=hi, aspect="auto")
    fig.colorbar(image, ax=ax, label=text(board.metric))
    ax.set_xticks(range(len(attacks)), [text(a) for a in attacks], rotation=30, ha="right")
    ax.set_yticks(range(len(defenses)), [text(d) for d in defenses])
    mid = (lo + hi) / 2
    for i, d in enumerate(defenses):
        for j, a in enumerate(attacks):
            value = means[i, j]
            strong = (value > mid) == board.higher_is_better
            label = "—" if not np.isfinite(value) else f"{value:.3f}"
            if (d, a) in flagged:
                label += "\nVIOLATION"
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="#0050ff", linewidth=3))
            ax.text(j, i, label, ha="center", va="center", fontsize=9,
                    color="white" if np.isfinite(value) and strong else "black")
    direction = "higher" if board.higher_is_better else "lower"
    ax.set_title(text(f"{board.track}: {board.metric} ({direction} = stronger attack)"))
    return png(fig)


def _defense_points(rows: list[dict[str, Any]]) -> tuple[dict[str, list[tuple[float, str]]], list[str]]:
    """DP families (defense name → [(target ε, label)] by ε) and the labels of defenses that claim no ε."""
    families: dict[str, dict[str, float]] = {}
    plain: list[str] = []
    for r in rows:
        if r.get("epsilon") is None:
            if r["defense_label"] not in plain:
                plain.append(r["defense_label"])
        else:
            families.setdefault(r["defense"], {})[r["defense_label"]] = float(r["epsilon"])
    return {name: sorted((eps, label) for label, eps in members.items()) for name, members in families.items()}, plain


def privacy_utility(board: TrackBoard, rows: list[dict[str, Any]]) -> bytes:
    """Utility and each attack's primary score against ε (log scale); non-private defenses as points of their own.

    The picture of the tutorial's Example 4 table: as ε grows, utility rises and so does the attacks' success.
    Error bars are 95% t-intervals over seeds, cut to [0, 1] (accuracy, AUC and success rates are rates).
    """
    families, plain = _defense_points(rows)
    epsilons = sorted({eps for members in families.values() for eps, _ in members})
    x_plain = epsilons[-1] * 4 if epsilons else 1.0
    fig = Figure(figsize=(12, 4.4))
    ax_u, ax_a = fig.subplots(1, 2)
    markers = "osD^vP*X"
    colors = [f"C{i}" for i in range(10)]

    def draw(ax: Axes, label_values: list[tuple[float, Any]], **style: Any) -> None:
        xs, ys, err = [], [], []
        for x, iv in label_values:
            if iv is None:
                continue
            xs.append(x)
            ys.append(iv.mean)
            low, high = (max(iv.low, 0.0), min(iv.high, 1.0)) if iv.n > 1 else (iv.mean, iv.mean)
            err.append((iv.mean - low, high - iv.mean))
        if xs:
            ax.errorbar(xs, ys, yerr=np.array(err).T, capsize=3, **style)

    for k, (name, members) in enumerate(families.items()):
        draw(ax_u, [(eps, board.utility_intervals.get(label)) for eps, label in members],
             marker=markers[k % len(markers)], color="black", label=text(name))
    for k, label in enumerate(plain):
        draw(ax_u, [(x_plain, board.utility_intervals.get(label))], marker=markers[(len(families) + k) % len(markers)],
             color="black", linestyle="none", label=text(label))
    for j, attack in enumerate(board.means.columns):
        color = colors[j % len(colors)]
        for k, (name, members) in enumerate(families.items()):
            draw(ax_a, [(eps, board.intervals.get((label, attack))) for eps, label in members],
                 marker=markers[k % len(markers)], color=color, label=text(f"{attack} vs {name}"))
        for k, label in enumerate(plain):
            draw(ax_a, [(x_plain, board.intervals.get((label, attack)))], color=color, linestyle="none",
                 marker=markers[(len(families) + k) % len(markers)], label=text(f"{attack} vs {label}"))
    if board.metric == "auc":
        ax_a.axhline(0.5, color="grey", linestyle=":", label="chance")
    for ax, ylabel in ((ax_u, "utility (test accuracy)"), (ax_a, text(board.metric))):
        ax.set_xscale("log")
        ticks = [*epsilons, x_plain]
        ax.set_xticks(ticks, [f"{e:g}" for e in epsilons] + ["non-private"])
        ax.minorticks_off()
        if epsilons:
            ax.axvline(math.sqrt(epsilons[-1] * x_plain), color="grey", linewidth=0.8, linestyle="--")
        ax.set_xlabel("ε (target)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax_u.set_title(text(f"{board.track}: utility"))
    ax_a.set_title(text(f"{board.track}: attack success"))
    return png(fig)


def mean_roc(curves: list[tuple[np.ndarray, np.ndarray]], grid: np.ndarray) -> np.ndarray:
    """Vertical average of ROC curves on ``grid``: at each FPR the best TPR reached without exceeding it."""
    out = []
    for fpr, tpr in curves:
        idx = np.searchsorted(fpr, grid, side="right") - 1
        out.append(np.where(idx >= 0, tpr[np.clip(idx, 0, None)], 0.0))
    return np.mean(out, axis=0)


def roc_curves(board: TrackBoard, rows: list[dict[str, Any]], arrays: ArrayLoader) -> bytes | None:
    """Log-log ROC curves of a membership track: one panel per attack, one line per defense (mean over seeds).

    None when no ok matchup of the track saved its scores.
    """
    curves: dict[tuple[str, str], list[tuple[np.ndarray, np.ndarray]]] = {}
    smallest = math.inf
    for r in rows:
        saved = arrays(r["key"]) if r.get("status") == "ok" else None
        if saved is None or "scores" not in saved:
            continue
        is_member = np.asarray(saved["is_member"]).astype(bool)
        fpr, tpr, _ = roc_curve(is_member, np.asarray(saved["scores"], dtype=np.float64))
        curves.setdefault((r["defense_label"], r["attack_label"]), []).append((fpr, tpr))
        smallest = min(smallest, 1.0 / max(1, int((~is_member).sum())))
    if not curves:
        return None
    attacks = [a for a in board.means.columns if any(key[1] == a for key in curves)]
    grid = np.logspace(math.log10(smallest), 0, 200)
    fig = Figure(figsize=(5.2 * len(attacks), 4.8))
    axes = np.atleast_1d(fig.subplots(1, len(attacks)))
    for ax, attack in zip(axes, attacks):
        for k, defense in enumerate(board.means.index):
            seeds = curves.get((defense, attack))
            if not seeds:
                continue
            tpr = mean_roc(seeds, grid)
            shown = np.where(tpr > 0, tpr, np.nan)
            ax.plot(grid, shown, color=f"C{k % 10}", label=text(f"{defense} (n={len(seeds)} seeds)"))
        ax.plot(grid, grid, color="grey", linestyle=":", label="chance")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(smallest, 1)
        ax.set_ylim(smallest, 1.05)
        ax.set_xlabel(f"false-positive rate (resolution {smallest:.2g})")
        ax.set_ylabel("true-positive rate")
        ax.set_title(text(f"{board.track}: {attack}"))
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8, loc="lower right")
    return png(fig)
