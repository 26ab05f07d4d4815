"""The reconstruction game's part of the report: the grids of targets, reconstructions and nearest neighbours,
and its rows of the DP audit.

Each grid is the PNG the game saved beside its matchup's artifacts; the report copies it (and its SVG and PDF,
where the game wrote them) into ``report/figures/``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any

from markupsafe import Markup

from arena.games.reconstruction.grids import GRID_FILE, VECTOR_FORMATS
from arena.games.reconstruction.rule import describe_reconstruction


def grid_figures(ctx: Any, caption: Callable[[dict[str, Any]], str],
                 grid_file: str = GRID_FILE) -> list[tuple[bytes, str]]:
    """(PNG bytes, ``caption(row)``) of every ok row's saved grid (``grid_file`` in its artifacts), each copied
    with its vector formats into the report's figures as ``<track>-grid-<defense>-<attack>-seed<seed>``."""
    figures = []
    for r in ctx.rows:
        path = ctx.store.artifact_dir(r["key"]) / grid_file
        if r.get("status") != "ok" or not path.is_file():
            continue
        stem = ctx.slug(f"{r['track']}-grid-{r['defense_label']}-{r['attack_label']}-seed{r['seed']}")
        ctx.figures.directory.mkdir(parents=True, exist_ok=True)
        for suffix in (".png", *(f".{f}" for f in VECTOR_FORMATS)):
            source = path.with_suffix(suffix)
            if source.is_file():
                target = ctx.figures.directory / f"{stem}{suffix}"
                shutil.copyfile(source, target)
                target.chmod(0o644)
        figures.append((path.read_bytes(), caption(r)))
    return figures


def section(ctx: Any) -> Markup:
    """Every saved grid of the track, copied into the report's figures (the report passes ``ctx``)."""
    fmt = ctx.fmt
    figures = grid_figures(ctx, lambda r: f"{r['track']}: {r['defense_label']} vs {r['attack']}, seed {r['seed']}; "
                                          f"success rate {fmt((r.get('metrics') or {}).get('success_rate'))}")
    return ctx.render("reconstruction.html.j2", track=ctx.board.track, figures=figures)


def audit_rows(records: Any, fmt: Any) -> list[list[Any]]:
    """One table row per audited reconstruction record (this game's and the gradients game's): the claim, κ, the
    allowed success and the bound beside the measured success and its verdict."""
    return [[r.track, r.defense_label, r.attack, r.seed, fmt(r.claimed_epsilon), f"{r.delta:g}",
             f"{fmt(r.kappa)} ({'exact' if r.kappa_exact else 'estimate'})", fmt(r.allowed), fmt(r.bound),
             r.bound_how, fmt(r.success_rate), r.n_targets, fmt(r.success_low),
             "ABOVE THE BOUND" if r.exceeds else "within"] for r in records]


def audit_section(audit: Any, page: Any) -> Markup:
    """Every reconstruction matchup against a claim: the measured success beside both bounds."""
    fmt = page.fmt
    records = audit.records if audit is not None else ()
    rows = audit_rows(records, fmt)
    return page.render("reconstruction-audit.html.j2", recon_rows=rows,
                       recon_lines=[describe_reconstruction(r) for r in records if r.exceeds])
