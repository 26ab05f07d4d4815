"""The membership game's figures: log-log ROC curves with bands, the most exposed records.

Each function returns a matplotlib ``Figure`` drawn for print through ``arena.results.figures`` (TrueType fonts,
constrained layout, at most three panels a row, one colour per defense of the track) on the Agg canvas."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from arena.contracts.arrays import ArrayLoader
from arena.contracts.metric import tpr_key
from arena.games.figures import as_image, text
from arena.results.figures import (
    MAX_COLUMNS,
    PANEL,
    defense_styles,
    empirical_roc,
    figure,
    legend_columns,
    log_log,
    most_exposed,
    panels,
    strongest_attacks,
    wrap,
)
from arena.results.figures import grid as grid_shape
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
    """Log-log ROC curves of a membership track: one panel per attack (at most three a row), one line per defense in
    the defense's colour of the track: the mean over seeds on a common log-FPR grid with its min–max band, floored
    at 1/n members. Each panel's legend (inside it, lower right, where no ROC above chance goes) gives each
    defense's AUC and TPR at 1 % FPR; the defenses' names are in the legend below the panels. A track with many
    cells is summarised: the ``TOP_ATTACKS`` strongest attacks' panels, each with the ``TOP_CURVES`` defenses it
    exposes most (``arena.results.figures``); only their matchups' arrays are read.

    None when no ok matchup of the track saved its scores.
    """
    chosen = {a: set(most_exposed(board, a, [str(d) for d in board.means.index])) for a in strongest_attacks(board)}
    curves: dict[tuple[str, str], list[tuple[np.ndarray, np.ndarray]]] = {}
    smallest, floor = math.inf, math.inf
    for r in rows:
        if r["defense_label"] not in chosen.get(r["attack_label"], ()):
            continue
        saved = arrays(r["key"]) if r.get("status") == "ok" else None
        if saved is None or "scores" not in saved:
            continue
        is_member = np.asarray(saved["is_member"]).astype(bool).reshape(-1)
        curves.setdefault((r["defense_label"], r["attack_label"]), []).append(
            empirical_roc(is_member, saved["scores"]))
        smallest = min(smallest, 1.0 / max(1, int((~is_member).sum())))
        floor = min(floor, 1.0 / max(1, int(is_member.sum())))
    if not curves:
        return None
    attacks = [a for a in board.means.columns if any(key[1] == a for key in curves)]
    defenses = [d for d in board.means.index if any(key[0] == d for key in curves)]
    styles = defense_styles(board)
    grid = np.logspace(math.log10(smallest), 0, 200)
    low_fpr = tpr_key(0.01)
    rows_, cols = grid_shape(len(attacks))
    fig = figure(PANEL[0] * cols, PANEL[1] * rows_ + 0.45 + 0.2 * math.ceil(len(defenses) / 3))
    for ax, attack in zip(panels(fig, len(attacks)), attacks):
        for defense in defenses:
            seeds = curves.get((defense, attack))
            if not seeds:
                continue
            mean, low, high = roc_bands(seeds, grid, floor)
            color = styles[defense]["color"]
            label = (f"AUC {_legend_value(board, 'auc', defense, attack)}, "
                     f"TPR@1% {_legend_value(board, low_fpr, defense, attack)}")
            ax.plot(grid, mean, color=color, linestyle=styles[defense]["linestyle"], linewidth=1.3,
                    label=text(label))
            if len(seeds) > 1:
                ax.fill_between(grid, low, high, color=color, alpha=0.12, linewidth=0)
        ax.plot(grid, grid, color="grey", linestyle=":", linewidth=0.8)
        log_log(ax)
        ax.set_xlim(smallest, 1)
        ax.set_ylim(min(floor, smallest) * 0.9, 1.05)
        ax.set_xlabel(f"FPR (resolution {smallest:.2g})")
        ax.set_ylabel(f"TPR (floor 1/n = {floor:.2g})")
        ax.set_title(wrap(attack, PANEL[0] - 0.7))
        ax.legend(loc="lower right", fontsize=6.5, handlelength=1.5)
    n_seeds = max(len(v) for v in curves.values())
    handles = [Line2D([], [], color=styles[d]["color"], linestyle=styles[d]["linestyle"], label=text(d))
               for d in defenses]
    handles.append(Line2D([], [], color="grey", linestyle=":", label="chance"))
    fig.legend(handles=handles, loc="outside lower center",
               ncols=legend_columns([str(h.get_label()) for h in handles], PANEL[0] * cols - 0.4))
    summary = "" if len(attacks) == len(board.means.columns) and len(defenses) == len(board.means.index) else (
        f"; the {len(attacks)} strongest of {len(board.means.columns)} attacks, each with the defenses it exposes most")
    fig.suptitle(wrap(f"{board.track}: ROC per attack (mean of up to {n_seeds} seeds, min–max band{summary})",
                      PANEL[0] * cols - 0.5, 10), fontsize=10)
    return fig


def exposed_records(panels_: list[tuple[str, list[tuple[np.ndarray, str]]]], shape: tuple[int, ...]) -> Figure:
    """The most exposed records as images: one row per (defense, attack) title (a row of its own, titled above
    its images), at most three images a row, each captioned below its title's row."""
    columns = min(max(len(items) for _, items in panels_), MAX_COLUMNS)
    fig = figure(1.45 * columns + 0.6, 1.85 * len(panels_))
    rows = fig.subfigures(len(panels_), 1, squeeze=False)[:, 0]
    for sub, (title, items) in zip(rows, panels_):
        sub.suptitle(wrap(title, 1.45 * columns + 0.3, 8), fontsize=8)
        axes = sub.subplots(1, columns, squeeze=False)[0]
        for j, ax in enumerate(axes):
            ax.set_xticks([])
            ax.set_yticks([])
            if j >= len(items):
                ax.axis("off")
                continue
            record, caption = items[j]
            img = as_image(record, shape)
            ax.imshow(img, cmap="gray" if img.ndim == 2 else None, vmin=0.0, vmax=1.0, interpolation="nearest")
            ax.set_title(wrap(caption, 1.3, 6.5), fontsize=6.5)
    return fig
