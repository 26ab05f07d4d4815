"""The report's figures: SVG and PDF beside the page, fixed colour scales, ROC means that never vanish, legends
with AUC and TPR at 1%, templates that are package data with autoescape and a core page that names no game."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import tomllib

from arena.games.membership import figures
from arena.results.leaderboard import build
from arena.results.report import plots
from arena.results.report.context import environment

REPORT = Path(__file__).resolve().parents[3] / "arena" / "results" / "report"


@pytest.mark.slow
def test_every_figure_is_written_as_svg_and_pdf(fake_run, report_text) -> None:
    figures = fake_run.store.root / "report" / "figures"
    names = {p.name for p in figures.iterdir()}
    for stem in ("digits-mlp-heatmap-tpr_1_fpr", "digits-mlp-heatmap-auc", "digits-mlp-roc",
                 "digits-mlp-privacy-utility", "digits-recon-privacy-utility"):
        assert {f"{stem}.svg", f"{stem}.pdf"} <= names, stem
        assert (figures / f"{stem}.pdf").read_bytes().startswith(b"%PDF")
        assert "<svg" in (figures / f"{stem}.svg").read_text()[:2000]
    assert not any(n.startswith("digits-recon-heatmap") for n in names)  # one cell: no heatmap


def test_heatmap_colour_scales_are_fixed() -> None:
    values = np.array([0.61, 0.64])
    assert plots.color_scale("auc", (0.0, 1.0), values) == (0.5, 1.0)
    assert plots.color_scale("tpr@1%fpr", (0.0, 1.0), values) == (0.0, 1.0)
    assert plots.color_scale("success_rate", (0.0, 1.0), values) == (0.0, 1.0)
    assert plots.color_scale("mse_mean", (0.0, float("inf")), values) == (0.61, 0.64)  # unbounded: the data


def test_roc_mean_and_band_stay_whole_where_a_seed_flags_no_member() -> None:
    grid = np.logspace(-2, 0, 50)
    flat = (np.array([0.0, 0.5, 1.0]), np.array([0.0, 0.0, 1.0]))  # TPR 0 until FPR 0.5
    good = (np.array([0.0, 0.01, 1.0]), np.array([0.0, 0.3, 1.0]))
    mean, low, high = figures.roc_bands([flat, good], grid, floor=0.01)
    assert np.all(np.isfinite(mean)) and np.all(mean >= 0.01) and np.all(low >= 0.01)  # never dropped on log axes
    assert np.all(low <= mean) and np.all(mean <= high)
    assert mean[0] == np.float64(0.15) and low[0] == 0.01 and high[0] == 0.3


def test_roc_legends_carry_auc_and_tpr_at_1pct(fake_run) -> None:
    from arena.results.audit import saved_arrays

    rows = [r for r in fake_run.store.results() if r["track"] == "digits-mlp"]
    (board,) = build(rows, arrays=saved_arrays(fake_run.store))
    fig = figures.roc_curves(board, rows, saved_arrays(fake_run.store))
    labels = [t.get_text() for ax in fig.axes for t in ax.get_legend().get_texts()]
    curves = [lab for lab in labels if lab != "chance"]
    assert curves and all(re.search(r"AUC \d\.\d{3}, TPR@1% (\d\.\d{3}|n/r)", lab) for lab in curves)


def test_templates_are_package_data_autoescaped_and_the_core_page_names_no_game() -> None:
    data = tomllib.loads((REPORT.parents[2] / "pyproject.toml").read_text())
    shipped = data["tool"]["setuptools"]["package-data"]

    def ships(package: str) -> bool:  # its templates/ folder, named from the package or as a package of its own
        return "templates/*.j2" in shipped.get(package, []) or "*.j2" in shipped.get(f"{package}.templates", [])

    assert ships("arena.results.report")
    assert any(d.startswith("jinja2") for d in data["project"]["dependencies"])
    env = environment()
    assert env.autoescape is True
    assert str(env.from_string("{{ x }}").render(x="<b>")) == "&lt;b&gt;"
    for game in ("membership", "reconstruction"):
        assert ships(f"arena.games.{game}")
    for core in REPORT.rglob("*"):  # the core report names no game; each game's section lives in its folder
        if core.suffix in (".py", ".j2"):
            text = core.read_text().lower()
            assert "membership" not in text and "reconstruction" not in text, core.name
    games = REPORT.parents[1] / "games"  # arena/games
    for game in ("membership", "reconstruction"):
        assert (games / game / "templates" / f"{game}.html.j2").is_file() and (games / game / "sections.py").is_file()
    for module in [*REPORT.glob("*.py"), *games.rglob("*.py")]:  # no hand escaping left, no import of the report
        text = module.read_text()
        assert "html.escape" not in text, module.name
        imports_report = re.search(r"^\s*(from|import) arena\.results\.report", text, re.M)
        assert module.parent == REPORT or not imports_report, module.name


@pytest.mark.slow
def test_audit_shows_the_replace_one_claim_certifiable_bound_and_no_false_inequality(fake_run, report_text) -> None:
    audit_part = report_text[report_text.index("<h2>DP audit</h2>"):]
    assert "replace-one ε tested" in audit_part and "max certifiable" in audit_part
    assert "measured ≤ bound" not in audit_part
    table = audit_part[: audit_part.index("</table>")]
    rows = re.findall(r"<tr( class=\"violation\")?>(.*?)</tr>", table, re.S)[1:]
    verdicts = [re.findall(r"<td[^>]*>(.*?)</td>", body)[-1] for _, body in rows]
    assert verdicts[0] == "VIOLATION" and "VIOLATION" not in verdicts[-1]  # violations first
    for _, body in rows:
        cells = re.findall(r"<td[^>]*>(.*?)</td>", body)
        tested, bound = float(cells[6].split()[0]), float(cells[7])
        assert (bound > tested) == (cells[-1] == "VIOLATION")  # the verdict agrees with the numbers beside it
