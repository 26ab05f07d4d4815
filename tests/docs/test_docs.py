"""Meta-tests of the documentation (the README and the site's pages under docs/, read together): every hook,
built-in plugin and CLI command is documented; every hook has a test; code in the docs imports only the public
facade and names only what it exports; every scenario in the docs validates; the site's navigation lists exactly
its pages; the README stays short and keeps its two commands."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest
import yaml

import arena
from arena import hookspecs
from arena.cli import EXIT_OK, _parser, main
from arena.plugins import registries
from tests.docs.markdown import DOCS, README, ROOT, blocks, documents, pages, python_blocks, text

DOC_TEXT = text()
HOOKS = [name for name, fn in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("register_")]
PYTHON_BLOCKS = [b for page in documents() for b in python_blocks(page)]


def test_there_are_hooks() -> None:
    assert {"register_datasets", "register_defenses", "register_attacks", "register_metrics", "register_models",
            "register_games"} <= set(HOOKS)


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_has_a_docstring_example_and_is_documented(hook: str) -> None:
    doc = inspect.getdoc(getattr(hookspecs, hook)) or ""
    assert "Example::" in doc and "register(" in doc
    assert f"`{hook}`" in DOC_TEXT
    assert f"def {hook}(register)" in (DOCS / "plugins.md").read_text(), f"the plugin guide shows no {hook}"


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_is_exercised_by_some_test(hook: str) -> None:
    here = Path(__file__).resolve()
    tests = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py") if p.resolve() != here)
    assert f"def {hook}(" in tests or hook in tests


def test_every_builtin_plugin_is_documented() -> None:
    regs = registries()
    kinds = {"dataset": regs.datasets, "defense": regs.defenses, "attack": regs.attacks, "model": regs.models,
             "game": regs.games}
    builtin = {(kind, e.name) for kind, reg in kinds.items() for e in reg if e.distribution == "privacy-arena"}
    assert {kind for kind, _ in builtin} == set(kinds)  # the built-ins are found at all
    missing = sorted((kind, name) for kind, name in builtin if f"`{name}`" not in DOC_TEXT)
    assert missing == []


def test_every_cli_command_is_documented() -> None:
    sub = next(a for a in _parser()._actions if a.dest == "command")
    assert {"run", "validate", "leaderboard", "report", "plugins"} <= set(sub.choices)
    missing = [command for command in sub.choices if f"arena {command}" not in DOC_TEXT]
    assert missing == []


def _arena_imports(code: str) -> list[tuple[str, list[str]]]:
    """(module, names) of every import of ``arena`` or one of its modules in ``code``."""
    found = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "arena":
            found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.split(".")[0] == "arena"]
    return found


def test_the_docs_have_python_blocks() -> None:
    assert len(PYTHON_BLOCKS) >= 8
    assert any(_arena_imports(b.code) for b in PYTHON_BLOCKS)


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=lambda b: b.where)
def test_doc_code_imports_only_the_public_facade(block) -> None:
    for module, names in _arena_imports(block.code):
        assert module == "arena", f"{block.where}: imports {module}; plugins and examples import from arena only"
        missing = [n for n in names if not hasattr(arena, n)]
        assert missing == [], f"{block.where}: arena does not export {missing}"


def _scenarios() -> list[tuple[str, str]]:
    found = []
    for page in documents():
        for b in blocks(page, "yaml"):
            if re.search(r"^tracks:", b.code, re.M):
                found.append((b.where, b.code))
    return found


@pytest.mark.parametrize(("where", "scenario"), _scenarios(), ids=[w for w, _ in _scenarios()])
def test_every_scenario_in_the_docs_validates(where: str, scenario: str, tmp_path: Path, capsys) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(scenario)
    assert main(["validate", str(path)]) == EXIT_OK, f"{where}: {capsys.readouterr().err}"


def test_the_site_lists_exactly_its_pages() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    listed = [next(iter(entry.values())) for entry in config["nav"]]
    assert sorted(listed) == sorted(p.name for p in pages())
    assert listed[0] == "index.md"
    assert config.get("site_dir") == "build/site" and "examples/" in config.get("exclude_docs", "")
    assert config["theme"]["name"] in ("mkdocs", "readthedocs")  # built in: no theme package to install


def test_the_readme_is_short_and_keeps_its_commands() -> None:
    readme = README.read_text()
    assert len(readme.splitlines()) < 250
    for command in ("make run", "make test", "make test-fast", "make lint", "make docs", "make bench"):
        assert command in readme, command
    for page in pages():
        assert f"](docs/{page.name})" in readme, f"the README does not link {page.name}"


def test_relative_links_of_the_readme_resolve() -> None:
    targets = re.findall(r"\]\((?!https?://|#)([^)#\s]+)", README.read_text())
    assert targets
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert missing == []
