"""Figures fit for print, read off the figures as drawn and the files as written: TrueType (never Type 3) fonts in
every PDF the report writes; no legend or title over another axes, legends inside their own axes (or in room of
their own), at most three panels a row; one colour per defense across the figures of a track; the defenses that
claim no ε at places of their own beside the ε axis; no 2-seed t-intervals; a page with a table of contents and
collapsible sections. The track drawn is a wide one: 5 defenses with recipe overrides (one heuristic without ε)
× 6 attacks."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from arena.results import leaderboard
from arena.results.audit import saved_arrays
from arena.results.figures import MAX_COLUMNS, OKABE_ITO, palette
from arena.results.report import plots
from tests.results.report.conftest import WIDE_ATTACKS, WIDE_DEFENSES, WIDE_TRACK

pytestmark = pytest.mark.slow  # a wide report drawn and written: ~10 s on a quiet 2-core machine
TOLERANCE = 1.5  # pixels: anti-aliasing and rounding of the layout


@pytest.fixture(scope="module")
def wide_report(wide_run) -> dict[str, Any]:
    """The wide run's report, written once; every figure captured by its stem as it was saved."""
    page, captured = report_with_figures(wide_run.root)
    return {"page": page, "figures": captured, "dir": wide_run.root / "report" / "figures"}


def report_with_figures(root: Path) -> tuple[str, dict[str, Figure]]:
    """Write the report of the run at ``root``: its page, and every figure captured by its stem as it was saved."""
    from arena.results.report.html import write_report

    captured: dict[str, Figure] = {}
    original = plots.Figures.save

    def save(self: plots.Figures, fig: Figure, stem: str) -> bytes:
        captured[stem] = fig
        return original(self, fig, stem)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plots.Figures, "save", save)
        page = write_report(root, ("svg", "pdf")).read_text(encoding="utf-8")
    return page, captured


def pdf_fonts(data: bytes) -> list[str]:
    """The ``/Subtype`` of every font dictionary of a PDF (matplotlib writes them uncompressed)."""
    return re.findall(rb"/Type\s*/Font\b[^>]*?/Subtype\s*/(\w+)", data) + \
        re.findall(rb"/Subtype\s*/(\w+)[^>]*?/Type\s*/Font\b", data)


def test_every_pdf_the_report_writes_embeds_truetype_fonts_and_no_type3(fake_run, report_text, wide_report) -> None:
    pdfs = [*(fake_run.store.root / "report" / "figures").glob("*.pdf"), *wide_report["dir"].glob("*.pdf")]
    assert len(pdfs) >= 8
    for pdf in pdfs:
        data = pdf.read_bytes()
        assert b"/Type3" not in data and not re.search(rb"/Subtype\s*/Type3", data), pdf.name
        subtypes = {s.decode() for s in pdf_fonts(data)}
        assert subtypes and subtypes <= {"Type0", "CIDFontType2", "TrueType"}, (pdf.name, subtypes)
        assert b"/FontFile2" in data, pdf.name  # the TrueType program itself is embedded
    if shutil.which("pdffonts"):  # poppler's reading agrees, where it is installed
        for pdf in pdfs:
            out = subprocess.run(["pdffonts", str(pdf)], capture_output=True, text=True, check=True).stdout
            rows = out.splitlines()[2:]
            assert rows and all("Type 3" not in r and " yes " in r for r in rows), (pdf.name, out)


def test_the_reconstruction_grids_a_game_saves_for_the_report_embed_truetype_too(tmp_path: Path) -> None:
    from arena.games.reconstruction.grids import save_grid

    records = np.random.default_rng(0).random((6, 64))
    save_grid(tmp_path / "grid.png", records, records, records, kind="image", shape=(8, 8), mse=np.ones(6),
              oracle_mse=np.ones(6))
    data = (tmp_path / "grid.pdf").read_bytes()
    assert not re.search(rb"/Subtype\s*/Type3", data) and b"/FontFile2" in data


def _visible_axes(fig: Figure) -> list[Any]:
    return [ax for ax in fig.axes if ax.get_visible() and ax.axison]


def _boxes(fig: Figure) -> tuple[Any, list[tuple[Any, Bbox]]]:
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return renderer, [(ax, ax.get_window_extent(renderer)) for ax in _visible_axes(fig)]


def _overlap(a: Bbox, b: Bbox) -> float:
    """The overlap of two boxes, in pixels of the thinner side (0: apart)."""
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return max(0.0, min(w, h))


def _inside(inner: Bbox, outer: Bbox) -> bool:
    return (inner.x0 >= outer.x0 - TOLERANCE and inner.x1 <= outer.x1 + TOLERANCE
            and inner.y0 >= outer.y0 - TOLERANCE and inner.y1 <= outer.y1 + TOLERANCE)


def _titles(fig: Figure) -> list[Any]:
    subfigures = [fig, *fig.subfigs]
    return [t for f in subfigures for t in (getattr(f, "_suptitle", None),) if t is not None and t.get_text()]


def test_no_legend_or_title_is_outside_its_axes_or_over_another(wide_report, fake_run, report_text) -> None:
    figures = wide_report["figures"]
    assert {f"{WIDE_TRACK}-{s}" for s in ("roc", "privacy-utility", "heatmap-auc", "tradeoff-roc")} <= set(figures)
    for stem, fig in figures.items():
        renderer, axes = _boxes(fig)
        for ax, box in axes:
            others = [b for a, b in axes if a is not ax]
            legend = ax.get_legend()
            if legend is not None and legend.get_visible():
                lb = legend.get_window_extent(renderer)
                assert _inside(lb, box), (stem, "legend outside its axes", ax.get_title())
                assert all(_overlap(lb, o) <= TOLERANCE for o in others), (stem, "legend over another axes")
            for title in (ax.title, ax._left_title, ax._right_title):
                if not title.get_text():
                    continue
                tb = title.get_window_extent(renderer)
                assert tb.x0 >= box.x0 - TOLERANCE and tb.x1 <= box.x1 + TOLERANCE, (stem, title.get_text())
                assert all(_overlap(tb, o) <= TOLERANCE for o in others), (stem, "title over another axes",
                                                                         title.get_text())
            ticks = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()]
            for i, a in enumerate(ticks):  # tick labels never print over each other
                assert all(_overlap(a, b) <= TOLERANCE for b in ticks[i + 1:]), (stem, "tick labels collide")
        for legend in fig.legends:  # a figure's own legend: in room of its own, over no axes
            lb = legend.get_window_extent(renderer)
            assert all(_overlap(lb, b) <= TOLERANCE for _, b in axes), (stem, "figure legend over an axes")
            assert _inside(lb, fig.bbox), stem
        for title in _titles(fig):
            tb = title.get_window_extent(renderer)
            assert all(_overlap(tb, b) <= TOLERANCE for _, b in axes), (stem, "suptitle over an axes")


def test_at_most_three_panels_a_row(wide_report) -> None:
    for stem, fig in wide_report["figures"].items():
        panels = [ax for ax in _visible_axes(fig) if not hasattr(ax, "_colorbar")]
        rows: dict[float, int] = {}
        for ax in panels:
            y = round(ax.get_position().y0, 2)
            rows[y] = rows.get(y, 0) + 1
        assert max(rows.values()) <= MAX_COLUMNS, (stem, rows)
    roc = wide_report["figures"][f"{WIDE_TRACK}-roc"]
    assert len(_visible_axes(roc)) == len(WIDE_ATTACKS)  # 6 attacks: two rows of three


def test_text_is_legible(wide_report) -> None:
    for stem, fig in wide_report["figures"].items():
        texts = fig.findobj(lambda artist: isinstance(artist, Text) and bool(artist.get_text()))
        sizes = [t.get_fontsize() for t in texts if t.get_visible()]
        assert min(sizes) >= 6.0, stem  # points: a figure printed at its width stays readable


def _colors(handles: list[Any]) -> dict[str, str]:
    return {h.get_label(): to_hex(h.get_color()) for h in handles if h.get_label() != "chance"}


def test_one_colour_per_defense_in_every_figure_of_the_track(wide_report) -> None:
    figures = wide_report["figures"]
    labels = [label for _, label, _, _ in WIDE_DEFENSES]
    (roc_legend,) = figures[f"{WIDE_TRACK}-roc"].legends
    (pu_legend,) = figures[f"{WIDE_TRACK}-privacy-utility"].legends
    roc = _colors(roc_legend.legend_handles)
    pu = _colors(pu_legend.legend_handles)
    assert set(roc) == set(pu) == set(labels)
    assert roc == pu  # the same colour for a defense in both figures
    assert len(set(roc.values())) == len(labels)  # and no two defenses alike
    assert set(roc.values()) <= {c.lower() for c in OKABE_ITO}  # colour-blind safe
    # the ROC panels draw each defense's curve in that colour
    for ax in _visible_axes(figures[f"{WIDE_TRACK}-roc"]):
        drawn = {to_hex(line.get_color()) for line in ax.get_lines() if line.get_label().startswith("AUC")}
        assert drawn == set(roc.values())
    # and the audited ROC panels draw each panel's seeds in its defense's colour
    for stem in (s for s in figures if s.startswith(f"{WIDE_TRACK}-tradeoff-roc")):
        for ax in _visible_axes(figures[stem]):
            defense = next(label for label in labels if ax.get_title().replace("\n", " ").startswith(label))
            seeds = [line for line in ax.get_lines() if line.get_label().startswith("seed")]
            assert seeds and {to_hex(line.get_color()) for line in seeds} == {roc[defense]}


def test_palette_is_stable_and_distinct_past_eight_methods() -> None:
    methods = [f"m{i}" for i in range(12)]
    a, b = palette(methods), palette(methods)
    assert a == b and list(a) == methods
    looks = {(s["color"], s["marker"], s["linestyle"]) for s in a.values()}
    assert len(looks) == 12


def test_defenses_without_eps_stand_beside_the_eps_axis_each_at_its_own_place(wide_report) -> None:
    fig = wide_report["figures"][f"{WIDE_TRACK}-privacy-utility"]
    ax = _visible_axes(fig)[0]
    ticks = {t.get_text(): x for t, x in zip(ax.get_xticklabels(), ax.get_xticks())}
    assert "non-private" not in ticks
    assert {"1", "2", "8"} <= set(ticks) and {"nonprivate", "mixup"} <= set(ticks)
    dp = max(ticks[e] for e in ("1", "2", "8"))
    assert ticks["nonprivate"] > dp and ticks["mixup"] > dp and ticks["nonprivate"] != ticks["mixup"]
    (separator,) = [line.get_xdata()[0] for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert dp < separator < min(ticks["nonprivate"], ticks["mixup"])
    # each non-DP defense's points sit at its own place in every panel
    colours = _colors(fig.legends[0].legend_handles)
    for panel in _visible_axes(fig):
        xs = {to_hex(line.get_color()): set(np.round(np.asarray(line.get_xdata(), dtype=float), 6))
              for line in panel.get_lines() if line.get_marker() not in (None, "None", "", ".")}
        assert xs[colours[WIDE_DEFENSES[1][1]]] == {round(ticks["mixup"], 6)}


def test_intervals_are_bootstrap_or_none_never_two_seed_t(wide_run) -> None:
    rows = wide_run.results()
    (board,) = leaderboard.build(rows, draws=wide_run.load_draws)
    assert {iv.method for g in board.grids.values() for iv in g.intervals.values()
            if g.info.name in ("auc", "tpr@1%fpr")} == {"bootstrap"}
    assert board.interval_method.startswith("95% intervals: percentile bootstrap over challenge points")
    # utility: one value per release, 2 seeds, no draws of the test set: no interval, and the table says so
    assert {iv.method for iv in board.utility_intervals.values()} == {"none"}
    assert all(iv.text() == "no interval (2 seeds)" for iv in board.utility_intervals.values())
    (bare,) = leaderboard.build(rows)  # nothing to resample: no interval at all rather than a t from 2 seeds
    assert {iv.method for iv in bare.intervals.values()} == {"none"}
    assert "no interval where a cell has fewer than 5 seeds" in bare.interval_method
    table = leaderboard.render_table([bare])
    assert "no interval (2 seeds)" in table and "t-interval" not in table.split("no interval where")[0]


def test_the_page_has_a_table_of_contents_and_collapsible_sections(wide_report, report_text) -> None:
    for page in (wide_report["page"], report_text):
        nav = page[page.index('<nav class="toc"'): page.index("</nav>")]
        links = re.findall(r'href="#([^"]+)"', nav)
        ids = set(re.findall(r'id="([^"]+)"', page))
        assert links and set(links) <= ids  # every entry leads somewhere
        assert {"audit", "scenarios", "timings"} <= set(links)
        assert page.count("<details") >= 8 and page.count("<details") == page.count("</details>")
        assert all(f"track-{t}" in links for t in re.findall(r"<summary><h2>Track ([^<]+)</h2>", page))
    page = wide_report["page"]
    assert f'id="track-{WIDE_TRACK}"' in page and f'href="#track-{WIDE_TRACK}-privacy-utility"' in page


def test_wide_track_figures_are_written_for_a_reader_to_look_at(wide_report, tmp_path: Path) -> None:
    """The wide track's figures as PNG (what the page embeds), kept under the test's folder for a person."""
    for stem, fig in wide_report["figures"].items():
        path = tmp_path / f"{stem}.png"
        path.write_bytes(plots.png(fig))
        assert path.stat().st_size > 10_000


def test_saved_arrays_drive_the_figures_not_only_the_draws(wide_run) -> None:
    # the ROC figure reads the scores themselves: their draws alone could not draw a curve
    from arena.games.membership import figures

    rows = wide_run.results()
    (board,) = leaderboard.build(rows, draws=wide_run.load_draws)
    fig = figures.roc_curves(board, rows, saved_arrays(wide_run))
    assert fig is not None and len(_visible_axes(fig)) == len(WIDE_ATTACKS)


@pytest.mark.slow
def test_many_defenses_without_eps_keep_their_tick_labels_apart(tmp_path: Path) -> None:
    """The catalog's board: eleven defenses that claim no ε beside DP-SGD at two ε. Their names, side by side,
    printed over each other; crowded, they are drawn upright and no two tick labels overlap."""
    from tests.results.report.conftest import membership_row, secret_store

    store = secret_store(tmp_path / "run")
    plain = ["nonprivate", "relaxloss", "label-smoothing", "early-stopping", "mixup-mmd", "adv-reg", "selena",
             "dmp", "hamp", "memguard", "output-perturbation-like"]
    for i, (defense, eps) in enumerate([(d, None) for d in plain] + [("dpsgd", 2.0), ("dpsgd", 8.0)]):
        store.append_result(membership_row(store, f"k{i}", defense, eps, "threshold-mia", 0, 0.5))
    fig = report_with_figures(store.root)[1]["digits-mlp-privacy-utility"]
    renderer, axes = _boxes(fig)
    for ax, _ in axes:
        labels = [t for t in ax.get_xticklabels() if t.get_text()]
        assert len(labels) == len(plain) + 2 and all(t.get_rotation() == 90 for t in labels)
        boxes = [t.get_window_extent(renderer) for t in labels]
        for i, a in enumerate(boxes):
            assert all(_overlap(a, b) <= TOLERANCE for b in boxes[i + 1:]), "tick labels collide"
