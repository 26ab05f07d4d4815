"""The report's figures: heatmaps and privacy-utility curves (each game draws its own, e.g. ROC curves).

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

from arena.games.figures import text
from arena.leaderboard import NOT_RESOLVABLE, TrackBoard, fpr_level
from arena.metrics import tpr_key

DPI = 110
FORMATS = ("svg", "pdf")


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
