"""Gradient-inversion grids: the client's records above the reconstructions matched to them, as a PNG.

The first ``columns`` records of the first trials (B = 1: one trial a column; B = 8: the first trial's batch),
each titled with its PSNR; the trial's target is marked. Image records are drawn as images, tabular ones as bar
charts. Drawn on matplotlib's Agg canvas directly (no pyplot, no display).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from arena.games.reconstruction.grids import write_figure

GRID_FILE = "grid.png"
ROWS = ("record", "reconstruction")


def save_grid(path: Path, arrays: dict[str, Any], *, kind: str, shape: tuple[int, ...], batch_size: int,
              columns: int = 8) -> Path:
    """Write the grid of ``arrays`` (the game's saved ``records``, ``reconstructions``, ``psnr``, ``is_target``)
    to ``path`` and beside it as SVG and PDF; return the PNG's path."""
    n = min(columns, len(arrays["records"]))
    if n == 0:
        raise ValueError("a gradient-inversion grid needs at least one record")
    records, recon = np.asarray(arrays["records"][:n]), np.asarray(arrays["reconstructions"][:n])
    psnr, target = np.asarray(arrays["psnr"][:n]), np.asarray(arrays["is_target"][:n]) > 0
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from arena.games.figures import as_image

    wide = kind != "image"
    lo = min(0.0, float(min(records.min(), recon.min())))
    hi = max(1.0, float(max(records.max(), recon.max())))
    fig = Figure(figsize=(n * (2.0 if wide else 1.1), 2.9))
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, n, squeeze=False)
    for r, (label, rows) in enumerate(zip(ROWS, (records, recon), strict=True)):
        for c in range(n):
            ax = axes[r, c]
            if kind == "image":
                img = as_image(rows[c], shape)
                ax.imshow(img, cmap="gray" if img.ndim == 2 else None, vmin=0.0, vmax=1.0, interpolation="nearest")
                ax.set_yticks([])
            else:
                ax.bar(np.arange(rows.shape[1]), rows[c], width=0.8, color="C0")
                ax.set_ylim(lo, hi)
                ax.tick_params(labelsize=6)
            ax.set_xticks([])
            if r == 0 and batch_size > 1 and target[c]:
                ax.set_title("target", fontsize=7)
            if r == 1:
                ax.set_title(f"{psnr[c]:.1f} dB", fontsize=7)
            if c == 0:
                ax.set_ylabel(label, fontsize=8)
    return write_figure(fig, path)
