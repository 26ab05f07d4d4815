"""Reconstruction grids (Balle et al. 2022, Figure 4): targets, reconstructions and nearest neighbours as a PNG.

One column per target; rows are the target, the attack's reconstruction and the closest point the adversary
already held (the oracle). Image records are drawn as images, tabular records as bar charts of their features.
Drawn on matplotlib's Agg canvas directly (no pyplot, no global state, no display needed).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes

GRID_FILE = "grid.png"
VECTOR_FORMATS = ("svg", "pdf")  # written beside the PNG
ROWS = ("target", "reconstruction", "nearest neighbour")


def _draw(ax: Axes, record: np.ndarray, img: np.ndarray | None, ylim: tuple[float, float]) -> None:
    """An image record as its image ``img``, a tabular one (``img`` None) as a bar chart of its features."""
    if img is not None:
        ax.imshow(img, cmap="gray" if img.ndim == 2 else None, vmin=0.0, vmax=1.0, interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
    else:
        ax.bar(np.arange(len(record)), record, width=0.8, color="C0")
        ax.set_ylim(*ylim)
        ax.set_xticks([])
        ax.tick_params(labelsize=6)


def save_grid(
    path: Path,
    targets: np.ndarray,
    reconstructions: np.ndarray,
    nearest: np.ndarray,
    *,
    kind: str,
    shape: tuple[int, ...],
    mse: np.ndarray | None = None,
    oracle_mse: np.ndarray | None = None,
    columns: int = 6,
) -> Path:
    """Write the grid of the first ``columns`` targets to ``path`` (parents created), and beside it the same grid
    as SVG and PDF; return the PNG's path."""
    n = min(columns, len(targets))
    if n == 0:
        raise ValueError("a reconstruction grid needs at least one target")
    rows = (targets[:n], reconstructions[:n], nearest[:n])
    shown = np.concatenate([np.asarray(r, dtype=np.float64) for r in rows])
    ylim = (min(0.0, float(shown.min())), max(1.0, float(shown.max())))
    wide = kind != "image"
    # Imported only when a grid is drawn (0.6 s); arena.games.figures also sets the print rcParams savefig reads.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from arena.games.figures import as_image

    fig = Figure(figsize=(n * (2.2 if wide else 1.3), 4.2))
    FigureCanvasAgg(fig)
    axes = fig.subplots(3, n, squeeze=False)
    for r, (label, records) in enumerate(zip(ROWS, rows, strict=True)):
        errors = {1: mse, 2: oracle_mse}.get(r)
        for c in range(n):
            ax = axes[r, c]
            _draw(ax, records[c], as_image(records[c], shape) if kind == "image" else None, ylim)
            if errors is not None:
                ax.set_title(f"MSE {errors[c]:.2g}", fontsize=7)
            if c == 0:
                ax.set_ylabel(label, fontsize=8)
    return write_figure(fig, path)


def write_figure(fig: Any, path: str | Path) -> Path:
    """Lay out ``fig`` and write it to ``path`` as PNG, and beside it in each vector format (the report copies
    these into report/figures/ for papers); the PNG's path."""
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=110)
    for fmt in VECTOR_FORMATS:
        fig.savefig(path.with_suffix(f".{fmt}"), format=fmt)
    return path
