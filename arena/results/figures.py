"""How every figure of the arena is drawn for print, in one place: TrueType (Type 42) fonts in PDF and PostScript,
constrained layout, at most three panels a row, titles wrapped to their axes, legends inside their own axes (or in
space of their own that constrained layout keeps clear of every axes), and one colour-blind-safe colour per method
of a track, assigned by the track's stable method order.

The report's figures (``arena.results.report.plots``) and the games' (``arena/games/*/figures.py``, the
reconstruction grids) all draw through ``figure``; importing this module sets matplotlib's ``rcParams`` for font
embedding once (``PRINT``), which every ``savefig`` reads. No pyplot, no display.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Iterable, Sequence
from typing import Any

import matplotlib
from matplotlib.figure import Figure

PRINT: dict[str, Any] = {
    "pdf.fonttype": 42,  # TrueType, not Type 3: what ACM's and IEEE's PDF checks accept
    "ps.fonttype": 42,
    "svg.fonttype": "none",  # SVG text stays text
    "font.size": 9.0,
    "axes.titlesize": 9.0,
    "axes.labelsize": 8.5,
    "legend.fontsize": 7.5,
    "xtick.labelsize": 7.5,
    "ytick.labelsize": 7.5,
}
matplotlib.rcParams.update(PRINT)  # type: ignore[arg-type]  # the stubs key rcParams by a Literal of names

MAX_COLUMNS = 3
"""Panels per row at most; more panels wrap to further rows."""
PANEL = (3.6, 3.0)
"""Width and height of one panel, inches."""

OKABE_ITO = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
"""Okabe & Ito's colour-blind-safe palette (blue, vermillion, bluish green, reddish purple, orange, sky blue, black,
yellow), in the order methods get them."""
MARKERS = ("o", "s", "D", "^", "v", "P", "X", "*")
LINESTYLES = ("-", "--", "-.", ":")


def text(s: object) -> str:
    """A plugin-supplied string made literal for matplotlib (a '$' would otherwise start mathtext)."""
    return str(s).replace("\\", "\\\\").replace("$", r"\$")


def figure(width: float, height: float) -> Figure:
    """A new figure of ``width`` × ``height`` inches on constrained layout (titles, labels, colour bars and outside
    legends get their own space, never another axes'), with an Agg canvas attached."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def grid(n: int, columns: int = MAX_COLUMNS) -> tuple[int, int]:
    """(rows, columns) for ``n`` panels at most ``columns`` a row."""
    columns = max(1, min(columns, MAX_COLUMNS, n))
    return math.ceil(max(n, 1) / columns), columns


def panels(fig: Figure, n: int, columns: int = MAX_COLUMNS, **kwargs: Any) -> list[Any]:
    """``n`` axes on a grid of at most three a row (wrapped); the unused cells of the last row are left empty."""
    rows, cols = grid(n, columns)
    spec = fig.add_gridspec(rows, cols)
    return [fig.add_subplot(spec[i // cols, i % cols], **kwargs) for i in range(n)]


def wrap(s: object, width_inches: float, fontsize: float = 9.0) -> str:
    """``s`` (made literal) wrapped to lines of about ``width_inches`` at ``fontsize`` points (an average glyph is
    about 0.58 em wide in DejaVu Sans), so that a title stays over its own axes: lines break after a space, an
    opening parenthesis or a comma (a label's parameters stay whole), a word longer than a line is cut."""
    per_line = max(8, int(width_inches * 72 / (0.58 * fontsize)))
    lines: list[str] = []
    for token in re.split(r"(?<=[\s(,])", text(s)):
        if lines and len(lines[-1]) + len(token.rstrip()) <= per_line:
            lines[-1] += token
        else:
            lines.extend([token] if len(token.rstrip()) <= per_line else textwrap.wrap(token, per_line))
    return "\n".join(line.strip() for line in lines if line.strip()) or text(s)


def palette(methods: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Each method's style (``color``, ``marker``, ``linestyle``) by its place in ``methods``, a track's stable
    order: colours from Okabe–Ito; past eight methods the colours repeat with the next marker and line style, so
    no two methods of a track look alike."""
    out: dict[str, dict[str, Any]] = {}
    for i, method in enumerate(dict.fromkeys(methods)):
        k, cycle = i % len(OKABE_ITO), i // len(OKABE_ITO)
        out[method] = {"color": OKABE_ITO[k], "marker": MARKERS[(k + cycle) % len(MARKERS)],
                       "linestyle": LINESTYLES[cycle % len(LINESTYLES)]}
    return out


def defense_styles(board: Any) -> dict[str, dict[str, Any]]:
    """One style per defense of a track (a ``TrackBoard``), in the board's defense order (non-private first, then
    by decreasing ε, then by label): the same colour for a defense in every figure of the track."""
    return palette(map(str, board.means.index))


def legend_columns(labels: Sequence[str], width_inches: float, fontsize: float = 7.5) -> int:
    """How many columns a figure legend of ``labels`` can have within ``width_inches``."""
    longest = max((len(s) for s in labels), default=1)
    entry = (longest * 0.58 * fontsize + 3.5 * fontsize) / 72  # text + handle + padding, inches
    return max(1, min(len(labels), int(width_inches / max(entry, 0.1))))


def empirical_roc(truth: Any, scores: Any) -> tuple[Any, Any]:
    """(FPR, TPR) at every threshold between distinct ``scores`` (higher: in), from (0, 0) to (1, 1): the points of
    scikit-learn's ``roc_curve`` without its dropping of collinear ones, in numpy (no scikit-learn import)."""
    import numpy as np

    truth = np.asarray(truth).astype(bool).reshape(-1)
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    order = np.argsort(-scores, kind="stable")
    s, t = scores[order], truth[order]
    last = np.r_[s[1:] != s[:-1], True]  # the last point of each run of equal scores
    tp, fp = np.cumsum(t)[last], np.cumsum(~t)[last]
    n_pos, n_neg = max(int(t.sum()), 1), max(int((~t).sum()), 1)
    return np.r_[0.0, fp / n_neg], np.r_[0.0, tp / n_pos]


def log_log(ax: Any) -> None:
    """Both axes on log scales with plain tick labels ('0.01', not mathtext's 10⁻², which is slow to lay out and
    to embed) at the decades, unlabelled minor ticks between them, and a light grid at the decades."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(LogLocator(base=10.0))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_locator(LogLocator(base=10.0, subs=(2.0, 5.0)))
        axis.set_minor_formatter(NullFormatter())
    ax.grid(alpha=0.3)


# ------------------------------------------------------------------- summaries of a track with many cells
TOP_ATTACKS = 6
"""A figure with a panel per attack draws at most this many: the strongest attacks of the track (its table reads
every one)."""
TOP_CURVES = 8
"""A panel with a curve per defense draws at most this many: the defenses the panel's attack exposes most."""
MANY_CELLS = 48
"""From this many defense × attack cells on, a track's per-cell figures and per-record tables are summarised: each
defense's strongest attack (the cells' own numbers stay in the leaderboard's tables)."""


def _strength(board: Any, values: Any) -> Any:
    """Cell means as the attacker reads them (higher: stronger), NaN as the weakest."""
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    v = v if board.higher_is_better else -v
    return np.where(np.isfinite(v), v, -np.inf)


def strongest_attacks(board: Any, k: int = TOP_ATTACKS) -> list[str]:
    """The ``k`` strongest attacks of a track's board (``TrackBoard``), by the attack ranking (mean rank across
    defenses of the ranking metric; one sort), in that order; every attack when there are at most ``k``."""
    attacks = [str(a) for a in board.means.columns]
    if len(attacks) <= k:
        return attacks
    ranked = [str(a) for a in board.attack_ranking.index if str(a) in attacks]
    return (ranked + [a for a in attacks if a not in ranked])[:k]


def most_exposed(board: Any, attack: str, defenses: Sequence[str], k: int = TOP_CURVES) -> list[str]:
    """Of ``defenses`` (in their order), the ``k`` that ``attack`` exposes most by the ranking metric's cell means
    (the first of equals), kept in the track's defense order; all of them when there are at most ``k``."""
    import numpy as np

    if len(defenses) <= k:
        return list(defenses)
    means = board.means[attack].reindex(defenses) if attack in board.means.columns else None
    if means is None:
        return list(defenses)[:k]
    chosen = set(np.argsort(-_strength(board, means.to_numpy()), kind="stable")[:k].tolist())
    return [d for i, d in enumerate(defenses) if i in chosen]


def strongest_per_defense(board: Any) -> dict[str, str]:
    """Each defense of the board → its strongest attack by the ranking metric's cell means (the first of equals)."""
    import numpy as np

    strength = _strength(board, board.means.to_numpy())
    attacks = [str(a) for a in board.means.columns]
    return {str(d): attacks[int(np.argmax(strength[i]))] for i, d in enumerate(board.means.index) if attacks}
