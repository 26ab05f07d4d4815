"""The reconstruction game's part of the report: the grids of targets, reconstructions and nearest neighbours.

Each grid is the PNG the game saved beside its matchup's artifacts; the report copies it (and its SVG and PDF,
where the game wrote them) into ``report/figures/``.
"""

from __future__ import annotations

import shutil

from markupsafe import Markup

from arena.report.context import TrackContext, fmt, render
from arena.report.grids import GRID_FILE, VECTOR_FORMATS
from arena.report.plots import slug


def section(ctx: TrackContext) -> Markup:
    figures = []
    for r in ctx.rows:
        path = ctx.store.artifact_dir(r["key"]) / GRID_FILE
        if r.get("status") != "ok" or not path.is_file():
            continue
        rate = (r.get("metrics") or {}).get("success_rate")
        caption = f"{r['track']}: {r['defense_label']} vs {r['attack']}, seed {r['seed']}; success rate {fmt(rate)}"
        stem = slug(f"{r['track']}-grid-{r['defense_label']}-{r['attack_label']}-seed{r['seed']}")
        ctx.figures.directory.mkdir(parents=True, exist_ok=True)
        for suffix in (".png", *(f".{f}" for f in VECTOR_FORMATS)):
            source = path.with_suffix(suffix)
            if source.is_file():
                target = ctx.figures.directory / f"{stem}{suffix}"
                shutil.copyfile(source, target)
                target.chmod(0o644)
        figures.append((path.read_bytes(), caption))
    return render("reconstruction.html.j2", track=ctx.board.track, figures=figures)
