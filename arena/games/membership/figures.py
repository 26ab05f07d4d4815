"""The membership game's figures: log-log ROC curves with bands, the most exposed records.

Each function returns a matplotlib ``Figure`` drawn on the Agg canvas directly (no pyplot, no global state)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from sklearn.metrics import roc_curve

from arena.contracts.arrays import ArrayLoader
from arena.contracts.metric import tpr_key
from arena.games.figures import as_image, text
from arena.results.leaderboard import NOT_RESOLVABLE, TrackBoard


def mean_roc(curves: list[tuple[np.ndarray, np.ndarray]], grid: np.ndarray) -> np.ndarray:
    """Vertical average of ROC curves on ``grid``: at each FPR the best TPR reached without exceeding it."""
    return np.mean(roc_on_grid(curves, grid), axis=0)


def roc_on_grid(curves: list[tuple[np.ndarray, np.ndarray]], grid: np.ndarray) -> np.ndarray:
    """Each ROC curve (fpr, tpr) read on ``grid`` [G]: at each FPR the best TPR reached without exceeding it; [S, G]."""
    out = []
    for fpr, tpr in curves:
        idx = np.searchsorted(fpr, grid + 1e-12, side="right") - 1
        out.append(np.where(idx >= 0, tpr[np.clip(idx, 0, None)], 0.0))
    return np.asarray(out)


def roc_bands(curves: list[tuple[np.ndarray, np.ndarray]], grid: np.ndarray,
              floor: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, min and max TPR over seeds on ``grid``, each floored at ``floor`` (1/n members): on log axes a TPR of
    0 would drop the point, so a curve and its band stay whole where a seed flags no member."""
    tprs = roc_on_grid(curves, grid)
    return (np.maximum(tprs.mean(axis=0), floor), np.maximum(tprs.min(axis=0), floor),
            np.maximum(tprs.max(axis=0), floor))


def _legend_value(board: TrackBoard, metric: str, defense: str, attack: str) -> str:
    grid = board.grids.get(metric)
    if grid is None:
        return "—"
    if (defense, attack) in grid.not_resolvable:
        return NOT_RESOLVABLE
    value = grid.means.loc[defense, attack] if defense in grid.means.index else math.nan
    return "—" if not np.isfinite(value) else f"{value:.3f}"


def roc_curves(board: TrackBoard, rows: list[dict[str, Any]], arrays: ArrayLoader) -> Figure | None:
    """Log-log ROC curves of a membership track: one panel per attack, one line per defense: the mean over seeds
    on a common log-FPR grid with its min–max band, floored at 1/n members; legends give AUC and TPR at 1 % FPR.

    None when no ok matchup of the track saved its scores.
    """
    curves: dict[tuple[str, str], list[tuple[np.ndarray, np.ndarray]]] = {}
    smallest, floor = math.inf, math.inf
    for r in rows:
        saved = arrays(r["key"]) if r.get("status") == "ok" else None
        if saved is None or "scores" not in saved:
            continue
        is_member = np.asarray(saved["is_member"]).astype(bool)
        fpr, tpr, _ = roc_curve(is_member, np.asarray(saved["scores"], dtype=np.float64))
        curves.setdefault((r["defense_label"], r["attack_label"]), []).append((fpr, tpr))
        smallest = min(smallest, 1.0 / max(1, int((~is_member).sum())))
        floor = min(floor, 1.0 / max(1, int(is_member.sum())))
    if not curves:
        return None
    attacks = [a for a in board.means.columns if any(key[1] == a for key in curves)]
    grid = np.logspace(math.log10(smallest), 0, 200)
    low_fpr = tpr_key(0.01)
    fig = Figure(figsize=(5.6 * len(attacks), 5.0))
    axes = np.atleast_1d(fig.subplots(1, len(attacks)))
    for ax, attack in zip(axes, attacks):
        for k, defense in enumerate(board.means.index):
            seeds = curves.get((defense, attack))
            if not seeds:
                continue
            mean, low, high = roc_bands(seeds, grid, floor)
            color = f"C{k % 10}"
            label = (f"{defense}: AUC {_legend_value(board, 'auc', defense, attack)}, "
                     f"TPR@1% {_legend_value(board, low_fpr, defense, attack)} (n={len(seeds)} seeds)")
            ax.plot(grid, mean, color=color, label=text(label))
            if len(seeds) > 1:
                ax.fill_between(grid, low, high, color=color, alpha=0.15, linewidth=0)
        ax.plot(grid, grid, color="grey", linestyle=":", label="chance")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(smallest, 1)
        ax.set_ylim(min(floor, smallest) * 0.9, 1.05)
        ax.set_xlabel(f"false-positive rate (resolution {smallest:.2g})")
        ax.set_ylabel(f"true-positive rate (floor 1/n = {floor:.2g})")
        ax.set_title(text(f"{board.track}: {attack}"))
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7, loc="lower right")
    return fig


def exposed_records(panels: list[tuple[str, list[tuple[np.ndarray, str]]]], shape: tuple[int, ...]) -> Figure:
    """The most exposed records as images: one row per (defense, attack) title, each image captioned."""
    columns = max(len(items) for _, items in panels)
    fig = Figure(figsize=(1.5 * columns + 2.4, 1.7 * len(panels)))
    axes = fig.subplots(len(panels), columns, squeeze=False)
    for i, (title, items) in enumerate(panels):
        for j in range(columns):
            ax = axes[i, j]
            ax.set_xticks([])
            ax.set_yticks([])
            if j >= len(items):
                ax.axis("off")
                continue
            record, caption = items[j]
            img = as_image(record, shape)
            ax.imshow(img, cmap="gray" if img.ndim == 2 else None, vmin=0.0, vmax=1.0, interpolation="nearest")
            ax.set_title(text(caption), fontsize=7)
            if j == 0:
                ax.set_ylabel(text(title), fontsize=7, rotation=0, ha="right", va="center")
    fig.tight_layout()
    return fig
