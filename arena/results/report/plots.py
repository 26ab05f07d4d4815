"""The report's figures: heatmaps, privacy-utility panels, and audited ROC curves over the claimed mechanism's
trade-off curve (drawn here for every game from the panels a game's section hands over, ``RocPanel``; each game draws
its own other figures, e.g. ROC curves per track).

Every figure is drawn for print through ``arena.results.figures`` (TrueType fonts, constrained layout, at most three
panels a row, legends inside their own axes or in space of their own, one colour per defense of a track in the
track's defense order). Each function returns a matplotlib ``Figure`` on the Agg canvas (no pyplot, no display);
``Figures.save`` returns the PNG bytes the page embeds and, on request, writes it as SVG and PDF under
``report/figures/``.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from arena.contracts.metric import FPR_LEVELS
from arena.results import figures as style
from arena.results.figures import PANEL, defense_styles, figure, log_log, panels, text, wrap
from arena.results.leaderboard import NOT_RESOLVABLE, TrackBoard, fpr_level

DPI = 110
VECTOR = ("svg", "pdf")
"""The vector formats a report writes its figures in on request (``arena report --formats svg,pdf``)."""


def slug(s: str) -> str:
    """A file-name-safe form of a track or metric name ('tpr@1%fpr' → 'tpr_1_fpr')."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s).strip("_.") or "figure"


def png(fig: Figure) -> bytes:
    """Render ``fig`` to PNG bytes (its constrained layout keeps everything inside the figure: no tight bbox, which
    would draw it twice)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


class Figures:
    """Keeps each figure of a report: its PNG for the page and, on request (``formats``: any of ``VECTOR``), the
    figure as ``<stem>.svg`` and ``<stem>.pdf`` in ``directory``, once per stem. Vector files cost more to write
    than the PNG (a PDF embeds its subset fonts), so a report writes none unless asked."""

    def __init__(self, directory: Path, formats: Collection[str] = ()) -> None:
        unknown = sorted(set(formats) - set(VECTOR))
        if unknown:
            raise ValueError(f"unknown figure format(s) {', '.join(unknown)}; choose from {', '.join(VECTOR)}")
        self.directory = Path(directory)
        self.formats = tuple(f for f in VECTOR if f in formats)
        self.written: list[Path] = []
        self.stems: set[str] = set()

    def save(self, fig: Figure, stem: str) -> bytes:
        """Write ``fig`` in the vector ``formats`` asked for (TrueType fonts, for papers) and return its PNG bytes
        (for the page)."""
        base, n = slug(stem), 2
        while base in self.stems:
            base, n = f"{slug(stem)}-{n}", n + 1
        self.stems.add(base)
        data = png(fig)  # lays the figure out (constrained layout) ...
        if self.formats:
            self.directory.mkdir(parents=True, exist_ok=True)
            fig.set_layout_engine("none")  # ... once: the vector formats reuse that layout instead of redoing it
        for fmt in self.formats:
            path = self.directory / f"{base}.{fmt}"
            fig.savefig(path, format=fmt, metadata={"Date": None} if fmt == "svg" else None)
            path.chmod(0o644)
            self.written.append(path)
        return data


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
    outlined and marked; cells the non-members cannot resolve read n/r. From ``MANY_CELLS`` cells on the grid is
    compact: small cells without their numbers (the leaderboard's tables hold them), n/r cells crossed."""
    metric = metric or board.metric
    grid = board.grids.get(metric)
    frame = grid.means if grid is not None else board.means
    higher = grid.info.higher_is_better if grid is not None else board.higher_is_better
    bounds = grid.info.bounds if grid is not None else (0.0, 1.0)
    means = frame.to_numpy(dtype=np.float64)
    defenses, attacks = list(frame.index), list(frame.columns)
    compact = means.size >= style.MANY_CELLS  # a number in every cell would be unreadable: the table has them
    cell, label_width = (0.32 if compact else 1.0), 2.8  # inches: a column, the most the defenses' names may take
    names = [wrap(d, label_width, 7.5) for d in defenses]
    longest = max((len(line) for n in names for line in n.splitlines()), default=1) * 0.58 * 7.5 / 72
    width = longest + 0.4 + cell * len(attacks) + 1.3  # names, cells, colour bar with its label
    fig = figure(width, 1.8 + (0.2 if compact else 0.42) * len(defenses) + (1.0 if compact else 0.0))
    ax = fig.add_subplot()
    lo, hi = color_scale(metric, bounds, means)
    image = ax.imshow(np.ma.masked_invalid(means), cmap="Reds" if higher else "Reds_r", vmin=lo, vmax=hi,
                      aspect="auto")
    direction = "higher" if higher else "lower"
    fig.colorbar(image, ax=ax, label=text(f"{metric} (fixed scale)"))
    if compact:
        ax.set_xticks(range(len(attacks)), [text(a) for a in attacks], fontsize=6.0, rotation=90)
    else:
        ax.set_xticks(range(len(attacks)), [wrap(a, 0.9 * cell, 7.0) for a in attacks], fontsize=7.0)
    ax.set_yticks(range(len(defenses)), names, fontsize=6.0 if compact else 7.5)
    mid = (lo + hi) / 2
    for i, d in enumerate(defenses):
        for j, a in enumerate(attacks):
            if compact:  # flagged cells outlined; n/r cells crossed; the numbers are in the tables
                if (d, a) in flagged:
                    ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="#0050ff", linewidth=2))
                if grid is not None and (d, a) in grid.not_resolvable:
                    ax.plot([j], [i], marker="x", color="grey", markersize=3, linestyle="none")
                continue
            value = means[i, j]
            strong = (value > mid) == higher
            if grid is not None and (d, a) in grid.not_resolvable:
                label = NOT_RESOLVABLE
            else:
                label = "—" if not np.isfinite(value) else f"{value:.3f}"
            if (d, a) in flagged:
                label += "\nVIOLATION"
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="#0050ff", linewidth=3))
            ax.text(j, i, label, ha="center", va="center", fontsize=8,
                    color="white" if np.isfinite(value) and strong else "black")
    how = "; blue outline: DP violation, ×: n/r; numbers in the table" if compact else ""
    ax.set_title(wrap(f"{board.track}: {metric} ({direction} = stronger attack{how})", max(3.0, cell * len(attacks))))
    return fig


# ----------------------------------------------------------------------------------------- privacy against utility


CROWDED_TICKS = 5
"""More x tick labels than this on a privacy-utility panel are drawn upright (a panel is about 3.5 in wide)."""


@dataclass(frozen=True)
class _Positions:
    """Where each defense sits on the x axis: DP defenses at log10 of their target ε, the defenses that claim no ε
    each at a place of its own to the right of the ε axis, past a dashed line."""

    x: dict[str, float]
    ticks: list[float]
    labels: list[str]
    separator: float | None
    families: dict[str, list[str]]  # DP defense plugin → its labels by ε (drawn joined)


def _positions(board: TrackBoard, rows: list[dict[str, Any]]) -> _Positions:
    eps: dict[str, float] = {}
    family: dict[str, str] = {}
    plain: list[str] = []
    for r in rows:
        label = r["defense_label"]
        family.setdefault(label, r["defense"])
        if r.get("epsilon") is None:
            if label not in plain:
                plain.append(label)
        else:
            eps[label] = float(r["epsilon"])
    order = [d for d in board.means.index if d in plain] + [d for d in plain if d not in board.means.index]
    x = {label: math.log10(e) for label, e in eps.items()}
    distinct = sorted(set(eps.values()))
    ticks, labels = [math.log10(e) for e in distinct], [f"{e:g}" for e in distinct]
    span = (ticks[-1] - ticks[0]) if len(ticks) > 1 else 1.0
    step = max(span / 3, 0.5)
    start = (ticks[-1] if ticks else 0.0) + step
    names = [family[label] for label in order]
    for k, label in enumerate(order):
        x[label] = start + k * step
        ticks.append(x[label])
        short = names[k] if names.count(names[k]) == 1 else f"{names[k]} #{names[:k + 1].count(names[k])}"
        labels.append(wrap(short, 0.9, 7.0))  # the plugin's name: the legend below gives the full label
    separator = start - step / 2 if distinct and order else None
    families: dict[str, list[str]] = {}
    for label in sorted(eps, key=lambda lab: eps[lab]):
        families.setdefault(family[label], []).append(label)
    return _Positions(x, ticks, labels, separator, families)


def _point(ax: Axes, x: float, iv: Any, style_: Mapping[str, Any], size: float = 6.0) -> None:
    """The mean at ``x`` with its interval as an error bar (none where there is no interval)."""
    if iv is None or not np.isfinite(iv.mean):
        return
    if math.isnan(iv.low):
        ax.plot([x], [iv.mean], linestyle="none", marker=style_["marker"], color=style_["color"], markersize=size)
        return
    err = [[max(iv.mean - iv.low, 0.0)], [max(iv.high - iv.mean, 0.0)]]
    ax.errorbar([x], [iv.mean], yerr=err, linestyle="none", marker=style_["marker"], color=style_["color"],
                markersize=size, capsize=3, linewidth=1.2)


def privacy_utility(board: TrackBoard, rows: list[dict[str, Any]]) -> Figure:
    """Utility, then each attack's ranking metric, against the defense's target ε (log scale): one panel each, at
    most three a row. The defenses that claim no ε (non-private training, heuristics) stand each at a position of
    its own beside the ε axis, never at a shared 'non-private' place. One colour per defense, as in every figure of
    the track; a DP family's configurations are joined by a thin line. Utility shows each seed (small dots) and the
    mean; the attack panels show the mean with the leaderboard's 95 % interval (bootstrap over challenge points,
    or t over ≥ 5 seeds) where it has one, and the mean alone where it has none. A track with more than
    ``TOP_ATTACKS`` attacks gets the panels of its strongest ones (``arena.results.figures.strongest_attacks``)."""
    pos = _positions(board, rows)
    styles = defense_styles(board)
    defenses = [d for d in board.means.index if d in pos.x]
    attacks = style.strongest_attacks(board)  # a track with many attacks: the strongest ones' panels
    n = 1 + len(attacks)
    rows_, cols = style.grid(n)
    fig = figure(PANEL[0] * cols, PANEL[1] * rows_ + 0.4 + 0.22 * math.ceil(len(defenses) / 3))
    axes = panels(fig, n)
    per_seed: dict[str, dict[int, float]] = {}  # defense → seed → utility (one release per seed)
    for r in rows:
        if r.get("utility") is not None and r["defense_label"] in pos.x:
            per_seed.setdefault(r["defense_label"], {})[r["seed"]] = float(r["utility"])

    def joined(ax: Axes, ys: Mapping[str, float]) -> None:
        for members in pos.families.values():
            pts = [(pos.x[m], ys[m]) for m in members if m in ys and np.isfinite(ys[m])]
            if len(pts) > 1:
                ax.plot(*zip(*pts), color="#999999", linewidth=0.8, zorder=1)

    ax_u = axes[0]
    means = {}
    for d in defenses:
        seeds = list(per_seed.get(d, {}).values())
        if seeds:
            ax_u.plot([pos.x[d]] * len(seeds), seeds, linestyle="none", marker=".", color=styles[d]["color"],
                      alpha=0.45, markersize=4)
        iv = board.utility_intervals.get(d)
        if iv is not None:
            means[d] = iv.mean
            _point(ax_u, pos.x[d], iv, styles[d])
    joined(ax_u, means)
    ax_u.set_ylabel("utility (test accuracy)")
    ax_u.set_title("utility")
    grid = board.grids.get(board.metric)
    bounds = grid.info.bounds if grid is not None else (-math.inf, math.inf)
    for ax, attack in zip(axes[1:], attacks):
        values = {}
        for d in defenses:
            iv = board.intervals.get((d, attack))
            if iv is not None and np.isfinite(iv.mean):
                values[d] = iv.mean
                _point(ax, pos.x[d], iv, styles[d])
        joined(ax, values)
        if board.metric == "auc":
            ax.axhline(0.5, color="grey", linestyle=":", linewidth=0.8)
        ax.set_ylabel(text(board.metric))
        ax.set_title(wrap(attack, PANEL[0] - 0.8))
        if math.isfinite(bounds[0]) and math.isfinite(bounds[1]):  # from the metric's floor, up to the data
            margin = 0.03 * (bounds[1] - bounds[0])
            top = min(ax.get_ylim()[1], bounds[1]) + margin
            ax.set_ylim(bounds[0] - margin, max(top, bounds[0] + 0.1 * (bounds[1] - bounds[0])))
    upright = len(pos.labels) > CROWDED_TICKS  # side by side they would overlap: each reads upwards instead
    for ax in axes:
        ax.set_xticks(pos.ticks, pos.labels, fontsize=7, rotation=90 if upright else 0)
        if pos.ticks:
            ax.set_xlim(min(pos.ticks) - 0.35, max(pos.ticks) + 0.35)
        if pos.separator is not None:
            ax.axvline(pos.separator, color="grey", linewidth=0.8, linestyle="--")
        ax.set_xlabel("target ε (log scale) │ no ε claimed" if pos.separator is not None else
                      ("target ε (log scale)" if pos.families else "defenses (no ε claimed)"))
        ax.grid(alpha=0.3)
    handles = [Line2D([], [], linestyle="none", marker=styles[d]["marker"], color=styles[d]["color"],
                      label=text(d)) for d in defenses]
    if handles:
        fig.legend(handles=handles, loc="outside lower center",
                   ncols=style.legend_columns([str(h.get_label()) for h in handles], PANEL[0] * cols - 0.4))
    some = (f"; the {len(attacks)} strongest of {len(board.means.columns)} attacks"
            if len(attacks) < len(board.means.columns) else "")
    fig.suptitle(wrap(f"{board.track}: privacy against utility (attack panels: {board.metric}{some})",
                      PANEL[0] * cols - 0.5, 10), fontsize=10)
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
    trade-off region of ``claim`` (a recorded claim dict) under ``relation`` ("add_remove" or "replace_one");
    ``defense`` and ``attack`` (labels) name its matchup; the curves get the defense's colour of the track."""

    title: str
    claim: Mapping[str, Any]
    relation: str
    curves: tuple[RocCurve, ...]
    defense: str | None = None
    attack: str | None = None


TRADEOFF_LEVELS = tuple(sorted(FPR_LEVELS))  # 0.1 %, 1 %, 10 %
ROC_POINTS = 200  # log-spaced FPRs at which an empirical ROC is drawn (a step function read at each)


def empirical_roc(curve: RocCurve) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(FPR, TPR) of the curve's scores (every threshold), and its numbers of positives and negatives."""
    truth = np.asarray(curve.truth).astype(bool).reshape(-1)
    n_pos, n_neg = int(truth.sum()), int((~truth).sum())
    if n_pos == 0 or n_neg == 0:
        return np.array([0.0, 1.0]), np.array([0.0, 1.0]), n_pos, n_neg
    fpr, tpr = style.empirical_roc(truth, curve.scores)
    return fpr, tpr, n_pos, n_neg


def roc_at(fpr: np.ndarray, tpr: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """The ROC read at ``levels``: the largest TPR among points whose FPR does not exceed each level."""
    idx = np.searchsorted(fpr, np.asarray(levels) + 1e-12, side="right") - 1
    best = np.maximum.accumulate(tpr)
    return np.where(idx >= 0, best[np.clip(idx, 0, None)], 0.0)


def _region_label(panel: RocPanel, bound: Any) -> str:
    return f"(ε, δ) = ({bound.epsilon:.3g}, {bound.delta:.2g}) region"


CURVE_STYLES: tuple[Literal["-", "--", "-.", ":"], ...] = ("-", "--", "-.", ":")


def tradeoff_roc(panels_: list[RocPanel], styles: Mapping[str, Mapping[str, Any]] | None = None,
                 columns: int = 3) -> Figure:
    """Each panel's empirical ROC curves (log-log: the low-FPR regime is where audits speak) over the claimed
    mechanism's trade-off region TPR ≤ 1 − f(FPR) (shaded, solid black edge; ``arena.privacy.tradeoff``) and the
    looser (ε, δ) region of the claim's ε for the relation played (dashed black), at most three panels a row. The
    measured curves are in the panel's defense colour (``styles``, the track's), thin, one line style per curve.
    A measured TPR is floored at 1/n positives so that a curve that flags none at low FPR stays on the axes (the
    bounds are drawn as computed); the FPR axis starts at the smallest resolvable 1/n negatives. One legend below
    the panels; each panel's (ε, δ) under its relation is under its FPR axis. Each bound line carries a gid
    (``mechanism-tradeoff-<i>``, ``eps-delta-region-<i>``, i the panel) that also names it in the SVG; how each
    bound was computed, and the curves' numbers of points, are in the table beside the figure."""
    from arena.privacy.tradeoff import claim_tradeoff

    rows, cols = style.grid(len(panels_), columns)
    fig = figure(PANEL[0] * cols, (PANEL[1] + 0.45) * rows + 0.5)
    axes = panels(fig, len(panels_), columns)
    names: dict[int, str] = {}  # line style → the curve it draws (the first panel's name for it)
    for i, (ax, panel) in enumerate(zip(axes, panels_)):
        rocs = [(c, *empirical_roc(c)) for c in panel.curves]
        smallest = min((1.0 / n_neg for *_, n_neg in rocs if n_neg), default=1e-3)
        floor = min((1.0 / n_pos for *_, n_pos, _ in rocs if n_pos), default=1e-3)
        grid = np.logspace(math.log10(smallest), 0.0, ROC_POINTS)
        bound = claim_tradeoff(panel.claim, panel.relation)  # type: ignore[arg-type]
        mech = bound.tpr_bound(grid)
        region = bound.eps_delta_tpr_bound(grid)
        bottom = max(min(floor, float(region[0]), float(mech[0]) if mech is not None else 1.0) * 0.8, 1e-8)
        if mech is not None:
            ax.fill_between(grid, bottom, mech, color="#bbbbbb", alpha=0.35, linewidth=0)
            (line,) = ax.plot(grid, mech, color="black", linewidth=1.6, label="claimed mechanism's bound")
            line.set_gid(f"mechanism-tradeoff-{i}")
        (edge,) = ax.plot(grid, region, color="black", linestyle="--", linewidth=1.0,
                          label=text(_region_label(panel, bound)))
        edge.set_gid(f"eps-delta-region-{i}")
        color = (styles or {}).get(panel.defense or "", {}).get("color", style.OKABE_ITO[0])
        for k, (curve, fpr, tpr, n_pos, n_neg) in enumerate(rocs):
            ax.plot(grid, np.maximum(roc_at(fpr, tpr, grid), floor), color=color, linewidth=1.2,
                    linestyle=CURVE_STYLES[k % len(CURVE_STYLES)], alpha=0.9,
                    label=text(f"{curve.label} ({n_pos} in + {n_neg} out)"))
        ax.plot(grid, grid, color="grey", linestyle=":", linewidth=0.8, label="chance")
        log_log(ax)
        ax.set_xlim(smallest, 1.0)
        ax.set_ylim(bottom, 1.05)
        words = "replace-one" if panel.relation == "replace_one" else "add/remove"
        ax.set_xlabel(f"FPR (resolution {smallest:.2g})\n{_region_label(panel, bound)}, {words}", fontsize=7.5)
        ax.set_ylabel(f"TPR (floor 1/n in = {floor:.2g})")
        ax.set_title(wrap(panel.title, PANEL[0] - 0.7, 8.5), fontsize=8.5)
        for k, (curve, *_rest) in enumerate(rocs):
            names.setdefault(k, curve.label)
    # one legend for every panel, in room of its own below them: the curves' colour is each panel's defense
    handles = [Line2D([], [], color="black", linewidth=1.6, label="claimed mechanism's bound (shaded: reachable)"),
               Line2D([], [], color="black", linestyle="--", linewidth=1.0, label="(ε, δ) region of the claim"),
               *(Line2D([], [], color="#555555", linestyle=CURVE_STYLES[k % len(CURVE_STYLES)], linewidth=1.2,
                        label=text(f"measured: {name}")) for k, name in sorted(names.items())),
               Line2D([], [], color="grey", linestyle=":", linewidth=0.8, label="chance")]
    fig.legend(handles=handles, loc="outside lower center", fontsize=7,
               ncols=style.legend_columns([str(h.get_label()) for h in handles], PANEL[0] * cols - 0.4, 7))
    return fig


def tradeoff_rows(panels_: list[RocPanel], levels: tuple[float, ...] = TRADEOFF_LEVELS) -> list[list[str]]:
    """Per panel and curve, at each FPR level: the measured TPR (n/r where the negatives cannot resolve the level),
    the claimed mechanism's TPR bound 1 − f(level) and the (ε, δ) region's; last, how the mechanism's bound was
    computed."""
    from arena.privacy.tradeoff import claim_tradeoff

    out = []
    for panel in panels_:
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
            cells.append(bound.how)
            out.append(cells)
    return out


def tradeoff_headers(levels: tuple[float, ...] = TRADEOFF_LEVELS) -> list[str]:
    """The columns of ``tradeoff_rows``."""
    heads = ["matchup", "curve", "in + out"]
    for level in levels:
        heads += [f"TPR @{level:.1%} FPR: measured", f"@{level:.1%}: mechanism's bound",
                  f"@{level:.1%}: (ε, δ) bound"]
    return [*heads, "claimed mechanism (how its bound is computed)"]
