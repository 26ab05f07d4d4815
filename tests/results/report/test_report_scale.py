"""A track with many cells gets a report that stays readable and linear: the strongest attacks' panels, each with
the defenses it exposes most, a compact heatmap, per-record tables of each defense's strongest attack; figures are
embedded as PNG and written as SVG and PDF only on request (``arena report --formats svg,pdf``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from arena.cli import main
from arena.pipeline.store import SECRET_ENV
from arena.results.figures import MANY_CELLS, TOP_ATTACKS, TOP_CURVES
from arena.results.report import plots
from arena.results.report.html import write_report
from benchmarks.rundir import SECRET, make_run_dir


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> dict:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(SECRET_ENV, SECRET)
        root = make_run_dir(tmp_path_factory.mktemp("wide") / "run", 300, tracks=1, seeds=1)  # 17 × 18 cells
        figures: dict = {}
        original = plots.Figures.save

        def save(self: plots.Figures, fig, stem: str) -> bytes:
            figures[stem] = fig
            return original(self, fig, stem)

        mp.setattr(plots.Figures, "save", save)
        page = write_report(root).read_text(encoding="utf-8")  # the default: no vector formats
    return {"root": root, "page": page, "figures": figures}


@pytest.mark.slow
def test_figures_of_a_track_with_many_cells_are_summarised(wide: dict) -> None:
    figures = wide["figures"]
    roc = figures["track-0-roc"]
    panels = [ax for ax in roc.axes if ax.get_title()]
    assert len(panels) == TOP_ATTACKS
    assert all(len(ax.get_lines()) <= TOP_CURVES + 1 for ax in panels)  # the curves and the chance line
    assert "strongest of 18 attacks" in roc.texts[0].get_text().replace("\n", " ")
    pu = figures["track-0-privacy-utility"]
    assert len([ax for ax in pu.axes if ax.get_title()]) == 1 + TOP_ATTACKS
    heat = figures["track-0-heatmap-tpr@1%fpr"]
    assert MANY_CELLS <= 17 * 18 and not heat.axes[0].texts  # compact: no number in any cell
    assert "Per defense and its strongest attack" in wide["page"]


@pytest.mark.slow
def test_vector_figures_are_written_only_on_request(wide: dict, capsys: pytest.CaptureFixture[str]) -> None:
    root: Path = wide["root"]
    assert not (root / "report" / "figures").exists()
    assert "--formats svg,pdf" in wide["page"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(SECRET_ENV, SECRET)
        assert main(["report", str(root), "--formats", "svg"]) == 0
    written = {p.suffix for p in (root / "report" / "figures").iterdir()}
    assert written == {".svg"}


def test_an_unknown_figure_format_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["report", str(tmp_path), "--formats", "svg,png"])
    assert exc.value.code == 2
    assert "unknown figure format png; choose from svg, pdf" in capsys.readouterr().err
