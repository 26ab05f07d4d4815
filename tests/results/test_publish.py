"""``arena publish RUN... --out DIR``: a static site (plain HTML and CSS, no script, nothing fetched) with an index
of tracks, a board per track, a page per method, downloads, the audit's verdicts and a content hash per row that
is the SHA-256 of the row's line in its run's results.jsonl; every link resolves, strings are escaped, the same
runs publish the same bytes, and headless Chromium renders every page without a console message."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import arena
from arena.cli import EXIT_INPUT, EXIT_OK, main
from tests.results.benchmark_runs import two_runs  # noqa: F401 - a fixture
from tests.results.report.conftest import EVIL_ATTACK, EVIL_DEFENSE, fake_run  # noqa: F401 - a fixture


@pytest.fixture(autouse=True)
def _no_suite_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading several runs: each has its own secret, so the suite's fixed ARENA_RUN_SECRET must not apply."""
    monkeypatch.delenv("ARENA_RUN_SECRET", raising=False)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
LINK = re.compile(r'(?:href|src)="([^"]*)"')


def pages(site: Path) -> list[Path]:
    return sorted(site.rglob("*.html"))


def assert_links_resolve(site: Path) -> None:
    for page in pages(site):
        html = page.read_text(encoding="utf-8")
        for target in LINK.findall(html):
            assert not re.match(r"^[a-z]+:", target) and not target.startswith("//"), (page, target)  # local only
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            assert file.is_file(), (page, target)
            if anchor:
                assert f'id="{anchor}"' in file.read_text(encoding="utf-8"), (page, target)


@pytest.mark.slow
def test_publish_two_runs(two_runs, tmp_path: Path, capsys) -> None:  # noqa: F811
    site = tmp_path / "site"
    assert main(["publish", str(two_runs.a), str(two_runs.b), "--out", str(site)]) == EXIT_OK
    assert capsys.readouterr().out.strip() == str(site / "index.html")
    names = {p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file()}
    assert {"index.html", "style.css", "leaderboard.csv", "leaderboard.json", "rows.jsonl", "audit.json",
            "manifest.json", "tracks/track-shared.html", "methods/defense-nonprivate.html",
            "methods/attack-threshold-mia.html"} <= names
    clash = sorted(n for n in names if n.startswith("tracks/track-clash-"))
    assert len(clash) == 2  # one board per definition of the conflicting track
    index = (site / "index.html").read_text(encoding="utf-8")
    assert "<script" not in index and "track &#39;clash&#39; has 2 definitions" in index
    assert_links_resolve(site)

    # a content hash per row: the SHA-256 of its line in its run's results.jsonl
    lines = {}
    for run in (two_runs.a, two_runs.b):
        for raw in (run / "results.jsonl").read_bytes().splitlines():
            lines[hashlib.sha256(raw).hexdigest()] = (run.name, json.loads(raw)["key"])
    rows = [json.loads(line) for line in (site / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and {lines[r["content_hash"]] for r in rows} == {(r["run"], r["source_key"]) for r in rows}
    shared = (site / "tracks/track-shared.html").read_text(encoding="utf-8")
    assert sum(r["content_hash"] in shared for r in rows) == 2 and "(n=2)" in shared

    manifest = json.loads((site / "manifest.json").read_text())["files"]
    assert set(manifest) == names - {"manifest.json"}
    assert all(hashlib.sha256((site / n).read_bytes()).hexdigest() == h for n, h in manifest.items())
    board = json.loads((site / "leaderboard.json").read_text())
    assert {b["track"] for b in board} == {"shared", *(Path(n).stem.replace("track-clash-", "clash@")
                                                       for n in clash)}

    again = tmp_path / "again"
    arena.load([two_runs.a, two_runs.b]).publish(again)
    assert all((again / n).read_bytes() == (site / n).read_bytes() for n in names)  # the same runs, the same bytes
    if CHROMIUM is not None:
        for page in pages(site):
            assert_renders(page, tmp_path)


def assert_renders(page: Path, tmp_path: Path) -> None:
    """Chromium opens ``page``, logs nothing to its console (no script error, nothing blocked), and lays out its
    tables."""
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run",
               f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0", "--dump-dom",
               page.resolve().as_uri()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, (page, console)
    assert "<table" in done.stdout and "</html>" in done.stdout


def test_publish_escapes_what_plugins_wrote_and_shows_the_audit(fake_run, tmp_path: Path) -> None:  # noqa: F811
    site = arena.load(fake_run.store.root).publish(tmp_path / "site")
    texts = {p: p.read_text(encoding="utf-8") for p in pages(site.parent)}
    assert not any("<script>alert" in t or "<img src=x" in t for t in texts.values())
    assert any("&lt;script&gt;alert(1)&lt;/script&gt;" in t for t in texts.values())
    index = texts[site]
    assert "The DP audit found" in index and "violation" in index
    track = next(t for p, t in texts.items() if p.name == "track-digits-mlp.html")
    assert 'class="violation"' in track and "empirical" in track  # the violating row carries its finding
    methods = {p.name for p in texts if p.parent.name == "methods"}
    assert {"defense-dpsgd.html", "attack-threshold-mia.html"} <= methods
    assert len([m for m in methods if m.startswith("defense-")]) == 3  # nonprivate, dpsgd and the hostile one
    assert EVIL_DEFENSE not in "".join(texts.values()) and EVIL_ATTACK not in "".join(texts.values())
    assert_links_resolve(site.parent)


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium; make report-check)")
def test_every_page_renders_in_headless_chromium(fake_run, tmp_path: Path) -> None:  # noqa: F811
    site = arena.load(fake_run.store.root).publish(tmp_path / "site")
    for page in pages(site.parent):
        assert_renders(page, tmp_path)


def test_publish_refuses_what_it_cannot_publish(fake_run, tmp_path: Path, capsys) -> None:  # noqa: F811
    run = fake_run.store.root
    assert main(["publish", str(tmp_path / "absent"), "--out", str(tmp_path / "site")]) == EXIT_INPUT
    assert "no results.jsonl here" in capsys.readouterr().err
    assert main(["publish", str(run), "--out", str(run)]) == EXIT_INPUT
    assert "is a run directory given" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert main(["publish", str(run), "--out", str(tmp_path / "file")]) == EXIT_INPUT
    assert not (tmp_path / "site").exists()
