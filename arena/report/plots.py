"""The report's figures: heatmaps, privacy-utility curves, log-log ROC curves with bands, exposed records.

Each function returns a matplotlib ``Figure`` drawn on the Agg canvas directly (no pyplot, no global state, no
display needed); ``Figures.save`` writes it as SVG and PDF under ``report/figures/`` and returns the PNG bytes the
page embeds.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from sklearn.metrics import roc_curve

from arena.audit import ArrayLoader
from arena.leaderboard import NOT_RESOLVABLE, TrackBoard, fpr_level
from arena.metrics import tpr_key

DPI = 110
FORMATS = ("svg", "pdf")


def text(s: object) -> str:
    """A plugin-supplied string made literal for matplotlib (a '$' would otherwise start mathtext)."""
    return str(s).replace("\\", "\\\\").replace("$", r"\$")


def slug(s: str) -> str:
    """A file-name-safe form of a track or metric name ('tpr@1%fpr' → 'tpr_1_fpr')."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s).strip("_.") or "figure"


def png(fig: Figure) -> bytes:
    """Render ``fig`` on an Agg canvas to PNG bytes."""
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return buf.getvalue()


class Figures:
    """Writes each figure of a report as ``<stem>.svg`` and ``<stem>.pdf`` into ``directory``, once per stem."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.written: list[Path] = []

    def save(self, fig: Figure, stem: str) -> bytes:
        """Write ``fig`` as SVG and PDF (vector, for papers) and return its PNG bytes (for the page)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        FigureCanvasAgg(fig)
        base, n = slug(stem), 2
        while any(p.stem == base for p in self.written):
            base, n = f"{slug(stem)}-{n}", n + 1
        for fmt in FORMATS:
            path = self.directory / f"{base}.{fmt}"
            fig.savefig(path, format=fmt, bbox_inches="tight", metadata={"Date": None} if fmt == "svg" else None)
            path.chmod(0o644)
            self.written.append(path)
        return png(fig)


def color_scale(metric: str, bounds: tuple[float, float], values: np.ndarray) -> tuple[float, float]:
    """A fixed colour range, so the same colour means the same number from run to run: [0.5, 1] for an AUC
    (0.5 = chance), [0, 1] for a TPR@FPR and any other metric bounded in [0, 1], else the metric's bounds, and the
    data's range only for an unbounded metric."""
    if metric == "auc":
        return 0.5, 1.0
    if fpr_level(metric) is not None:
        return 0.0, 1.0
    if math.isfinite(bounds[0]) and math.isfinite(bounds[1]):
        return bounds
    finite = values[np.isfinite(values)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    return (lo - 0.05, hi + 0.05) if hi - lo < 1e-9 else (lo, hi)


def heatmap(board: TrackBoard, metric: str | None = None, flagged: Collection[tuple[str, str]] = ()) -> Figure:
    """Defense × attack grid of ``metric``'s mean over seeds (the ranking metric by default) on a fixed colour
    scale; darker = stronger attack. Cells in ``flagged`` ((defense label, attack) pairs the DP audit flags) are
    outlined and marked; cells the non-members cannot resolve read n/r."""
    metric = metric or board.metric
    grid = board.grids.get(metric)
    frame = grid.means if grid is not None else board.means
    higher = grid.info.higher_is_better if grid is not None else board.higher_is_better
    bounds = grid.info.bounds if grid is not None else (0.0, 1.0)
    means = frame.to_numpy(dtype=np.float64)
    defenses, attacks = list(frame.index), list(frame.columns)
    fig = Figure(figsize=(1.8 + 1.6 * len(attacks), 1.3 + 0.5 * len(defenses)))
    ax = fig.add_subplot()
    lo, hi = color_scale(metric, bounds, means)
    image = ax.imshow(np.ma.masked_invalid(means), cmap="Reds" if higher else "Reds_r", vmin=lo, vmax=hi,
                      aspect="auto")
    fig.colorbar(image, ax=ax, label=text(f"{metric} (scale fixed at [{lo:g}, {hi:g}])"))
    ax.set_xticks(range(len(attacks)), [text(a) for a in attacks], rotation=30, ha="right")
    ax.set_yticks(range(len(defenses)), [text(d) for d in defenses])
    mid = (lo + hi) / 2
    for i, d in enumerate(defenses):
        for j, a in enumerate(attacks):
            value = means[i, j]
            strong = (value > mid) == higher
            if grid is not None and (d, a) in grid.not_resolvable:
                label = NOT_RESOLVABLE
            else:
                label = "—" if not np.isfinite(value) else f"{value:.3f}"
            if (d, a) in flagged:
                label += "\nVIOLATION"
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="#0050ff", linewidth=3))
            ax.text(j, i, label, ha="center", va="center", fontsize=9,
                    color="white" if np.isfinite(value) and strong else "black")
    direction = "higher" if higher else "lower"
    ax.set_title(text(f"{board.track}: {metric} ({direction} = stronger attack)"))
    return fig


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


def privacy_utility(board: TrackBoard, rows: list[dict[str, Any]]) -> Figure:
    """Utility and each attack's ranking score against ε (log scale); non-private defenses as points of their own.

    The picture of the tutorial's Example 4 table: as ε grows, utility rises and so does the attacks' success.
    Error bars are the leaderboard's 95% intervals (bootstrap or t, as its header says), cut to [0, 1].
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
            low, high = (max(iv.low, 0.0), min(iv.high, 1.0)) if not math.isnan(iv.low) else (iv.mean, iv.mean)
            err.append((max(iv.mean - low, 0.0), max(high - iv.mean, 0.0)))
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
    ax_a.set_title(text(f"{board.track}: attack success ({board.metric})"))
    return fig


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
    from arena.report.grids import as_image

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
