"""The Python blocks of the docs marked runnable run as written.

A block is runnable when the line right above its opening fence is ``<!-- runnable -->`` (``tests/docs/markdown.py``).
The runnable blocks of a page run in page order in one namespace, in an empty working directory; an ``assert`` in a
block is part of what the page promises. Most of the plugin guide's blocks must be runnable.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.markdown import DOCS, README, documents, python_blocks

RUNNABLE_PAGES = [p for p in documents() if any(b.runnable for b in python_blocks(p))]


def test_the_plugin_guide_is_mostly_runnable() -> None:
    guide = python_blocks(DOCS / "plugins.md")
    runnable = [b for b in guide if b.runnable]
    assert len(guide) >= 6
    assert len(runnable) >= 0.75 * len(guide), [b.where for b in guide if not b.runnable]


def test_the_runnable_marker_is_only_used_on_python_blocks() -> None:
    for page in documents():
        lines = page.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip() == "<!-- runnable -->":
                after = lines[i + 1].strip() if i + 1 < len(lines) else ""
                assert after == "```python", f"{page.name}:{i + 1}: <!-- runnable --> must sit right above ```python"


@pytest.mark.parametrize("page", RUNNABLE_PAGES, ids=lambda p: p.name)
def test_runnable_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
    for block in (b for b in python_blocks(page) if b.runnable):
        code = compile(block.code, block.where, "exec")
        exec(code, namespace)


def test_the_readme_marks_nothing_it_cannot_run() -> None:
    # The README's Python example plays the whole quickstart; tests/test_api.py runs it on a tiny scenario instead.
    assert not any(b.runnable for b in python_blocks(README))
