"""The report opens in headless Chromium without console errors, and the screenshot is painted with the heatmaps.

Skipped without a Chromium; ``make report-check`` installs one and runs this on the quickstart run
(ARENA_REPORT_RUN_DIR), keeping the screenshot (ARENA_REPORT_SCREENSHOT) for a person to look at.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from arena.results.report.html import write_report
from tests.results.report.test_report_html import Page

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (make report-check installs it)")
WIDTH, HEIGHT = 1400, 3000


def chromium(profile: Path, *args: str) -> subprocess.CompletedProcess:
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
               "--enable-logging=stderr", "--v=0", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)


@pytest.mark.subprocess
def test_report_renders_in_headless_chromium(fake_run, tmp_path: Path) -> None:
    run_dir = Path(os.environ.get("ARENA_REPORT_RUN_DIR") or fake_run.store.root)
    page = write_report(run_dir).resolve()  # Makefile passes a relative RUN_DIR; a file URI needs an absolute path
    shot = Path(os.environ.get("ARENA_REPORT_SCREENSHOT") or tmp_path / "report.png")
    shot.parent.mkdir(parents=True, exist_ok=True)

    painted = chromium(tmp_path / "profile-shot", f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}",
                       page.as_uri())
    assert painted.returncode == 0, painted.stderr[-2000:]
    console = [line for line in painted.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, console  # the page logs nothing: no script errors, nothing blocked

    pixels = imread(shot)[..., :3]
    assert pixels.shape[:2] == (HEIGHT, WIDTH)
    # The heatmaps' fixed scales (AUC on [0.5, 1], TPR on [0, 1]) paint any cell above the bottom of the scale in
    # matplotlib's Reds: red well above blue.
    reds = (pixels[..., 0] > 0.5) & (pixels[..., 0] - pixels[..., 2] > 0.25)
    assert reds.sum() > 2000, "the heatmap cells should be painted in the first screen"

    dom = chromium(tmp_path / "profile-dom", "--dump-dom", page.as_uri())
    assert dom.returncode == 0
    rendered = Page(dom.stdout)
    source = Page(page.read_text(encoding="utf-8"))
    assert len(rendered.images) == len(source.images) > 0
    headings = " ".join(rendered.text)
    assert "Heatmap" in headings and "Privacy-utility trade-off" in headings and "DP audit" in headings
    assert np.ptp(pixels) > 0.5  # not a blank page
