"""The plugin reference (docs/reference.md) documents every public name of the facade: each name in
``arena.__all__`` has its entry, no entry names anything else, and each function's and data class's signature is
the one the page shows, so that the page cannot drift from the code."""

from __future__ import annotations

import dataclasses
import inspect
import re

import pytest

import arena
from tests.docs.markdown import DOCS

PAGE = DOCS / "reference.md"


class _Plain:
    """An annotation written as it reads in the source (``inspect`` quotes string annotations)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _plain(annotation: object) -> object:
    return _Plain(annotation) if isinstance(annotation, str) else annotation


def rendered(name: str, obj: object) -> str | None:
    """``name(signature)`` of a function or a data class as the reference shows it (None for anything else: a base
    class, a pydantic model, a type alias or a constant, which the page describes in words)."""
    if not (inspect.isfunction(obj) or (isinstance(obj, type) and dataclasses.is_dataclass(obj))):
        return None
    sig = inspect.signature(obj)
    sig = sig.replace(parameters=[p.replace(annotation=_plain(p.annotation)) for p in sig.parameters.values()],
                      return_annotation=_plain(sig.return_annotation))
    return f"{name}{sig}"


def _entries() -> dict[str, str]:
    """Heading name → the text of its entry (up to the next heading)."""
    text = PAGE.read_text()
    parts = re.split(r"^### `([^`]+)`\n", text, flags=re.M)
    return {parts[i]: re.split(r"^#{1,3} ", parts[i + 1], flags=re.M)[0] for i in range(1, len(parts), 2)}


def test_every_public_name_has_an_entry_and_no_entry_names_anything_else() -> None:
    entries = _entries()
    assert sorted(set(arena.__all__) - set(entries)) == [], "public names without an entry in docs/reference.md"
    assert sorted(set(entries) - set(arena.__all__)) == [], "entries for names the facade does not export"
    assert len(entries) == len(arena.__all__)


@pytest.mark.parametrize("name", [n for n in arena.__all__ if rendered(n, getattr(arena, n)) is not None])
def test_the_page_shows_the_current_signature(name: str) -> None:
    entry = _entries()[name]
    assert f"```text\n{rendered(name, getattr(arena, name))}\n```" in entry, (
        f"docs/reference.md shows another signature of {name}: regenerate its entry")


@pytest.mark.parametrize("name", arena.__all__)
def test_each_entry_says_what_a_plugin_does_with_it(name: str) -> None:
    words = re.sub(r"```.*?```", "", _entries()[name], flags=re.S).split()
    assert len(words) >= 5, f"the entry of {name} says too little"


def test_the_rendering_shows_annotations_as_written() -> None:
    def f(x: int, y: list[str] | None = None) -> dict[str, int]:
        return {}

    assert rendered("f", f).replace("'", "") == rendered("f", f)
    assert rendered("f", f) == "f(x: int, y: list[str] | None = None) -> dict[str, int]"
    assert rendered("Attack", arena.Attack) is None
