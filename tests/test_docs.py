"""Meta-tests: every hook, built-in plugin and CLI command is documented, and every hook has a test."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from arena import hookspecs
from arena.cli import _parser
from arena.plugins import registries

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
HOOKS = [name for name, fn in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("register_")]


def test_there_are_hooks() -> None:
    assert {"register_datasets", "register_defenses", "register_attacks", "register_metrics"} <= set(HOOKS)


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_has_a_docstring_example_and_readme_mention(hook: str) -> None:
    doc = inspect.getdoc(getattr(hookspecs, hook)) or ""
    assert "Example::" in doc and "register(" in doc
    assert f"`{hook}`" in README


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_is_exercised_by_some_test(hook: str) -> None:
    tests = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py") if p.name != "test_docs.py")
    assert f"def {hook}(" in tests or hook in tests


def test_every_builtin_plugin_is_in_the_readme() -> None:
    regs = registries()
    missing = [e.name for reg in (regs.datasets, regs.defenses, regs.attacks) for e in reg
               if e.distribution == "privacy-arena" and f"`{e.name}`" not in README and e.name not in README]
    assert missing == []


def test_every_cli_command_is_in_the_readme() -> None:
    sub = next(a for a in _parser()._actions if a.dest == "command")
    for command in sub.choices:
        assert f"arena {command}" in README, command
