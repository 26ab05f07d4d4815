"""The report's figures: heatmaps, privacy-utility curves, and audited ROC curves over the claimed mechanism's
trade-off curve (drawn here for every game from the panels a game's section hands over, ``RocPanel``; each game draws
its own other figures, e.g. ROC curves per track).

Each function returns a matplotlib ``Figure`` drawn on the Agg canvas directly (no pyplot, no global state, no
display needed); ``Figures.save`` writes it as SVG and PDF under ``report/figures/`` and returns the PNG bytes the
page embeds.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from sklearn.metrics import roc_curve

from arena.contracts.metric import FPR_LEVELS
from arena.results.leaderboard import NOT_RESOLVABLE, TrackBoard, fpr_level

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


# ----------------------------------------------------------------- ROC over the claimed mechanism's trade-off curve


@dataclass(frozen=True)
class RocCurve:
    """One empirical ROC: ``scores`` (higher: the record is in) against ``truth`` (1: in), and its legend label."""

    label: str
    scores: np.ndarray
    truth: np.ndarray


@dataclass(frozen=True)
class RocPanel:
    """One audited matchup (or the seeds of one defense × attack sharing a claim): its ROC curves drawn over the
    trade-off region of ``claim`` (a recorded claim dict) under ``relation`` ("add_remove" or "replace_one")."""

    title: str
    claim: Mapping[str, Any]
    relation: str
    curves: tuple[RocCurve, ...]


TRADEOFF_LEVELS = tuple(sorted(FPR_LEVELS))  # 0.1 %, 1 %, 10 %
ROC_POINTS = 400  # log-spaced FPRs at which an empirical ROC is drawn (a step function read at each)


def empirical_roc(curve: RocCurve) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(FPR, TPR) of the curve's scores (every threshold), and its numbers of positives and negatives."""
    truth = np.asarray(curve.truth).astype(bool).reshape(-1)
    scores = np.asarray(curve.scores, dtype=np.float64).reshape(-1)
    n_pos, n_neg = int(truth.sum()), int((~truth).sum())
    if n_pos == 0 or n_neg == 0:
        return np.array([0.0, 1.0]), np.array([0.0, 1.0]), n_pos, n_neg
    fpr, tpr, _ = roc_curve(truth, scores)
    return fpr, tpr, n_pos, n_neg


def roc_at(fpr: np.ndarray, tpr: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """The ROC read at ``levels``: the largest TPR among points whose FPR does not exceed each level."""
    idx = np.searchsorted(fpr, np.asarray(levels) + 1e-12, side="right") - 1
    best = np.maximum.accumulate(tpr)
    return np.where(idx >= 0, best[np.clip(idx, 0, None)], 0.0)


def _claim_label(panel: RocPanel, bound: Any) -> tuple[str, str]:
    words = "replace-one" if panel.relation == "replace_one" else "add/remove"
    return (f"claimed mechanism: {bound.how}",
            f"({words}) (ε = {bound.epsilon:.3g}, δ = {bound.delta:.2g}) region")


def tradeoff_roc(panels: list[RocPanel], columns: int = 3) -> Figure:
    """Each panel's empirical ROC curves (log-log: the low-FPR regime is where audits speak) over the claimed
    mechanism's trade-off region TPR ≤ 1 − f(FPR) (shaded, solid edge; ``arena.privacy.tradeoff``) and the looser (ε, δ)
    region of the claim's ε for the relation played (dashed). A measured TPR is floored at 1/n positives so that a
    curve that flags none at low FPR stays on the axes (the bounds are drawn as computed); the FPR axis starts at the
    smallest resolvable 1/n negatives. Each bound line carries a gid (``mechanism-tradeoff-<i>``,
    ``eps-delta-region-<i>``, i the panel) that also names it in the SVG."""
    from arena.privacy.tradeoff import claim_tradeoff

    columns = max(1, min(columns, len(panels)))
    rows = math.ceil(len(panels) / columns)
    fig = Figure(figsize=(5.4 * columns, 6.0 * rows))
    axes = np.atleast_1d(fig.subplots(rows, columns, squeeze=False)).reshape(-1)
    for i, (ax, panel) in enumerate(zip(axes, panels)):
        rocs = [(c, *empirical_roc(c)) for c in panel.curves]
        smallest = min((1.0 / n_neg for *_, n_neg in rocs if n_neg), default=1e-3)
        floor = min((1.0 / n_pos for *_, n_pos, _ in rocs if n_pos), default=1e-3)
        grid = np.logspace(math.log10(smallest), 0.0, ROC_POINTS)
        bound = claim_tradeoff(panel.claim, panel.relation)  # type: ignore[arg-type]
        mech_label, region_label = _claim_label(panel, bound)
        mech = bound.tpr_bound(grid)
        region = bound.eps_delta_tpr_bound(grid)
        bottom = max(min(floor, float(region[0]), float(mech[0]) if mech is not None else 1.0) * 0.8, 1e-8)
        if mech is not None:
            ax.fill_between(grid, bottom, mech, color="#9ecae1", alpha=0.35, linewidth=0)
            (line,) = ax.plot(grid, mech, color="#08519c", linewidth=2.0, label=text(mech_label))
            line.set_gid(f"mechanism-tradeoff-{i}")
        (edge,) = ax.plot(grid, region, color="#08519c", linestyle="--", linewidth=1.2, label=text(region_label))
        edge.set_gid(f"eps-delta-region-{i}")
        for k, (curve, fpr, tpr, n_pos, n_neg) in enumerate(rocs):
            ax.plot(grid, np.maximum(roc_at(fpr, tpr, grid), floor), color=f"C{(k + 1) % 10}", linewidth=1.4,
                    label=text(f"{curve.label} ({n_pos} in + {n_neg} out)"))
        ax.plot(grid, grid, color="grey", linestyle=":", linewidth=0.8, label="chance")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(smallest, 1.0)
        ax.set_ylim(bottom, 1.05)
        ax.set_xlabel(f"false-positive rate (resolution {smallest:.2g})")
        ax.set_ylabel(f"true-positive rate (measured: floor 1/n in = {floor:.2g})")
        ax.set_title(text(panel.title), fontsize=9)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.14))  # below: the curves stay clear
    for ax in axes[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    return fig


def tradeoff_rows(panels: list[RocPanel], levels: tuple[float, ...] = TRADEOFF_LEVELS) -> list[list[str]]:
    """Per panel and curve, at each FPR level: the measured TPR (n/r where the negatives cannot resolve the level),
    the claimed mechanism's TPR bound 1 − f(level) and the (ε, δ) region's."""
    from arena.privacy.tradeoff import claim_tradeoff

    out = []
    for panel in panels:
        bound = claim_tradeoff(panel.claim, panel.relation)  # type: ignore[arg-type]
        at = np.asarray(levels, dtype=np.float64)
        mech = bound.tpr_bound(at)
        region = bound.eps_delta_tpr_bound(at)
        for curve in panel.curves:
            fpr, tpr, n_pos, n_neg = empirical_roc(curve)
            measured = roc_at(fpr, tpr, at)
            cells = [panel.title, curve.label, f"{n_pos} + {n_neg}"]
            for j, level in enumerate(levels):
                resolves = n_neg > 0 and 1.0 / n_neg <= level * (1 + 1e-9)
                cells += [f"{measured[j]:.4f}" if resolves else NOT_RESOLVABLE,
                          "—" if mech is None else f"{mech[j]:.4f}", f"{region[j]:.4f}"]
            out.append(cells)
    return out


def tradeoff_headers(levels: tuple[float, ...] = TRADEOFF_LEVELS) -> list[str]:
    """The columns of ``tradeoff_rows``."""
    heads = ["matchup", "curve", "in + out"]
    for level in levels:
        heads += [f"TPR @{level:.1%} FPR: measured", f"@{level:.1%}: mechanism's bound",
                  f"@{level:.1%}: (ε, δ) bound"]
    return heads
