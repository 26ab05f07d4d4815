"""The documentation as the tests read it: the README and the site's pages (``docs/*.md``, not ``docs/examples/``),
their fenced code blocks, and which Python blocks are marked runnable.

The convention: a fenced ```python block whose opening fence is on the line right after ``<!-- runnable -->`` is
runnable. The runnable blocks of one page run in order in one namespace (a later block may use what an earlier one
defined), in an empty temporary working directory, and must finish in seconds: they define plugins and try them
on hand-made inputs; tournaments are played by ``test_readme_examples.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
RUNNABLE = "<!-- runnable -->"

_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.S | re.M)


@dataclass(frozen=True)
class Block:
    """One fenced code block: its page, the line its opening fence is on (1-based), language and text."""

    page: Path
    line: int
    lang: str
    code: str
    runnable: bool

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    """The site's pages: every ``docs/*.md`` (``docs/examples/`` holds example packages, not pages)."""
    return sorted(DOCS.glob("*.md"))


def documents() -> list[Path]:
    """The README and every page of the site."""
    return [README, *pages()]


def text() -> str:
    """The README and every page, as one text."""
    return "\n".join(p.read_text() for p in documents())


def blocks(page: Path, lang: str | None = None) -> list[Block]:
    """The fenced code blocks of ``page`` in order (only those of ``lang`` if given)."""
    source = page.read_text()
    out = []
    for m in _FENCE.finditer(source):
        line = source.count("\n", 0, m.start()) + 1
        before = source[: m.start()].removesuffix("\n").rsplit("\n", 1)[-1].strip()  # the line right above
        block = Block(page, line, m["lang"], m["body"], runnable=before == RUNNABLE)
        if lang is None or block.lang == lang:
            out.append(block)
    return out


def python_blocks(page: Path) -> list[Block]:
    return blocks(page, "python")


def block(page: Path, marker: str) -> str:
    """The one Python block of ``page`` that contains ``marker``."""
    (found,) = [b.code for b in python_blocks(page) if marker in b.code]
    return found
