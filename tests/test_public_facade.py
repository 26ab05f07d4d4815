"""The public facade: the built-in plugins import only ``arena``'s public names (as a third-party plugin would), every
public name resolves and is listed, and the ``TYPE_CHECKING`` block that editors read says exactly what the lazy
table ``_EXPORTS`` loads."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import arena

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = sorted((ROOT / "plugins").glob("*.py"))
EXAMPLES = sorted((ROOT / "docs" / "examples").glob("*/*.py"))
"""The example third-party plugins the docs teach from: they import only the facade too."""
FACADE = ROOT / "arena" / "__init__.py"


def _arena_imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of every import of ``arena`` or one of its submodules in ``path``, wherever it is."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "arena" or node.module.startswith("arena."):
                found.append((node.lineno, node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names if a.name.split(".")[0] == "arena"]
    return found


def test_the_plugins_folder_holds_the_builtin_plugins() -> None:
    assert {p.stem for p in PLUGINS} >= {"datasets", "defenses", "games", "membership", "models", "reconstruction"}


def test_the_docs_hold_example_plugins() -> None:
    assert {p.parent.name for p in EXAMPLES} >= {"arena-example-attack", "arena-example-defense", "arena-example-game"}


@pytest.mark.parametrize("path", PLUGINS + EXAMPLES, ids=lambda p: p.name)
def test_a_builtin_plugin_imports_only_public_names_of_arena(path: Path) -> None:
    public = set(arena.__all__)
    wrong = []
    for line, module, names in _arena_imports(path):
        if module != "arena" or not names:
            wrong.append(f"{path.name}:{line}: import of {module} (only `from arena import ...` is public)")
        else:
            wrong += [f"{path.name}:{line}: arena.{n} is not public" for n in names if n not in public]
    assert wrong == []


def test_the_walk_sees_private_imports_anywhere_in_a_module(tmp_path: Path) -> None:
    source = tmp_path / "p.py"
    source.write_text("from arena import Attack\nimport arena.engine\n"
                      "def f():\n    from arena.engine.rng import stream\n    import arena\n")
    assert _arena_imports(source) == [(1, "arena", ["Attack"]), (2, "arena.engine", []), (4, "arena.engine.rng",
                                                                                          ["stream"]), (5, "arena", [])]


def test_every_public_name_resolves_and_is_listed() -> None:
    assert len(set(arena.__all__)) == len(arena.__all__)
    missing = [name for name in arena.__all__ if getattr(arena, name, None) is None]
    assert missing == []
    assert set(dir(arena)) >= set(arena.__all__)
    with pytest.raises(AttributeError, match="no attribute 'engine_internals'"):
        arena.engine_internals  # noqa: B018 - the facade refuses what it does not export


def _type_checking_imports() -> dict[str, tuple[str, str]]:
    """Name → (module, attribute) of every import in the facade's ``if TYPE_CHECKING:`` block."""
    tree = ast.parse(FACADE.read_text())
    (block,) = [n for n in tree.body if isinstance(n, ast.If) and isinstance(n.test, ast.Name)
                and n.test.id == "TYPE_CHECKING"]
    out: dict[str, tuple[str, str]] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom), ast.dump(node)
        for alias in node.names:
            name = alias.asname or alias.name
            assert name not in out, f"{name} imported twice under TYPE_CHECKING"
            out[name] = (node.module, alias.name)
    return out


def test_the_type_checking_block_and_the_export_table_say_the_same() -> None:
    seen = _type_checking_imports()
    exports = arena._EXPORTS
    assert sorted(set(seen) - set(exports)) == [], "under TYPE_CHECKING but not exported"
    assert sorted(set(exports) - set(seen)) == [], "exported but invisible to type checkers"
    assert {n: seen[n] for n in seen if seen[n] != exports[n]} == {}, "the two name different objects"
    assert arena.__all__ == ["__version__", *exports]


REMOVED = {"Accountant": "arena.privacy.accounting", "plan_pool": "arena.games.membership.pools"}
"""Names dropped from the facade (no plugin needs them; CHANGELOG), still importable from their modules."""


@pytest.mark.parametrize("name", sorted(REMOVED))
def test_a_name_dropped_from_the_facade_stays_in_its_module(name: str) -> None:
    import importlib

    assert name not in arena.__all__
    assert getattr(importlib.import_module(REMOVED[name]), name) is not None
