"""The HTML report: self-contained, every plugin and scenario string escaped, and showing what it promises."""

from __future__ import annotations

import base64
import io
from html.parser import HTMLParser

import numpy as np
import pytest
from matplotlib.image import imread

from arena.cli import EXIT_INPUT, EXIT_OK, main
from arena.games.membership import figures
from tests.results.report.conftest import EVIL_ATTACK, EVIL_DEFENSE

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class Page(HTMLParser):
    """Tags, image sources and alt texts, and the visible text of a page."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.images: list[tuple[str, str]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "img":
            a = dict(attrs)
            self.images.append((a.get("src") or "", a.get("alt") or ""))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def image(self, alt_start: str) -> bytes:
        (src,) = [s for s, alt in self.images if alt.startswith(alt_start)]
        return base64.b64decode(src.removeprefix("data:image/png;base64,"))


@pytest.mark.slow
def test_report_is_one_self_contained_page_without_scripts(report_text) -> None:
    page = Page(report_text)
    assert "script" not in page.tags and "link" not in page.tags and "iframe" not in page.tags
    assert page.images, "the report shows figures"
    for src, alt in page.images:
        assert src.startswith("data:image/png;base64,"), alt  # embedded, so the page works offline and moved
        data = base64.b64decode(src.removeprefix("data:image/png;base64,"))
        assert data.startswith(PNG_MAGIC) and imread(io.BytesIO(data)).size > 0


@pytest.mark.slow
def test_plugin_and_scenario_strings_are_escaped(report_text) -> None:
    text = report_text
    assert EVIL_DEFENSE not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "<img src=x" not in text and "&lt;img src=x onerror=alert(2)&gt;" in text
    assert "alert('scenario')</script>" not in text and "&lt;/pre&gt;&lt;script&gt;alert(&#39;scenario&#39;)" in text
    assert "<b>boom</b>" not in text and "&lt;b&gt;boom&lt;/b&gt;" in text  # a failure's error message
    # Once parsed, the hostile names read back as the plain text they are.
    visible = "".join(Page(text).text)
    assert EVIL_DEFENSE in visible and EVIL_ATTACK in visible


@pytest.mark.slow
def test_report_shows_tables_figures_audit_grids_scenario_and_timings(fake_run, report_text) -> None:
    page = Page(report_text)
    alts = [alt for _, alt in page.images]
    # Membership is ranked by TPR at 1% FPR with AUC beside it; both get a heatmap.
    assert "heatmap of tpr@1%fpr for track digits-mlp" in alts and "heatmap of auc for track digits-mlp" in alts
    # The reconstruction track has one defense and one attack: its number, not a 1×1 heatmap.
    assert not any(alt.startswith("heatmap of") and "digits-recon" in alt for alt in alts)
    for track in ("digits-mlp", "digits-recon"):
        assert f"privacy-utility curves for track {track}" in alts
    assert "ROC curves for track digits-mlp" in alts and "ROC curves for track digits-recon" not in alts
    # The reconstruction grid is the engineer's PNG, byte for byte.
    assert page.image("digits-recon: dpsgd(eps=1) vs gradient-inversion, seed 0") == fake_run.grid_png
    visible = " ".join(page.text)
    assert "success_rate (one defense, one attack: no heatmap)" in visible and "0.250 ± 0.071 (n=2)" in visible
    assert "Attacks by mean rank" in visible and "pareto" in visible
    assert "DP violations" in visible and "VIOLATION" in visible
    assert "replace-one ε" in visible and "max certifiable" in visible
    assert "name: evil" in visible  # the scenario as run
    assert "19 matchups" in visible and "3.00" in visible  # timings per matchup


@pytest.mark.slow
def test_violations_are_highlighted_in_the_tables(report_text) -> None:
    assert report_text.count('<td class="violation">') >= 2  # leaderboard cell and audit verdict
    assert '<tr class="violation">' in report_text


@pytest.mark.slow
def test_report_command(fake_run, tmp_path, capsys) -> None:
    target = fake_run.store.root / "report" / "index.html"
    assert main(["report", str(fake_run.store.root)]) == EXIT_OK
    assert capsys.readouterr().out.strip() == str(target)
    assert target.stat().st_mode & 0o777 == 0o644  # readable by whoever serves or opens it
    assert main(["report", str(tmp_path / "nowhere")]) == EXIT_INPUT
    assert "no results.jsonl" in capsys.readouterr().err


def test_mean_roc_averages_the_step_curves_vertically() -> None:
    grid = np.array([0.0, 0.25, 0.5, 1.0])
    a = (np.array([0.0, 0.5, 1.0]), np.array([0.0, 1.0, 1.0]))  # TPR 1 from FPR 0.5
    b = (np.array([0.0, 0.0, 1.0]), np.array([0.0, 0.5, 1.0]))  # TPR 0.5 at FPR 0
    assert figures.mean_roc([a, b], grid).tolist() == [0.25, 0.25, 0.75, 1.0]


def test_matplotlib_text_is_literal() -> None:
    assert figures.text("$\\frac$") == "\\$\\\\frac\\$"


@pytest.mark.slow
def test_every_tpr_at_fpr_in_the_tables_carries_its_operating_point(fake_run, report_text) -> None:
    """The leaderboard's TPR@FPR cells read '<mean ± sd (n)> (thr t, FPR f %, k FP / n over 2 seeds)': the pooled
    counts of the rows' operating points."""
    from arena.results import leaderboard

    (board,) = [b for b in leaderboard.build(fake_run.store.results()) if b.track == "digits-mlp"]
    assert board.metric == "tpr@1%fpr"
    visible = " ".join(Page(report_text).text)
    for (d, a), point in board.grids["tpr@1%fpr"].points.items():
        assert f"{board.grids['tpr@1%fpr'].cells.loc[d, a]} ({point.text()})" in visible, (d, a)
        assert point.nonmembers == 200 and " FP / 200 over 2 seeds" in point.text()
    assert len(board.grids["tpr@1%fpr"].points) == board.means.size
