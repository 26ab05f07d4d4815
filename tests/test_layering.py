"""The package's architecture, read from its imports: no cycles between modules, no import from a lower layer to a
higher one, no module too long to read at once.

Every reference from one ``arena`` module to another is an edge: ``import``/``from … import`` at any depth
(function-level lazy imports included), relative imports, ``from arena import x`` where ``x`` is a submodule,
``importlib.import_module("arena.…")`` and string references to a module or ``"module:attribute"``
(``"arena.games.membership.rule:audit_game"``), the way games name their audit rules and report sections. Imports
inside an ``if TYPE_CHECKING:`` block are type-only: they do not run, so they are left out of the cycle check, but
they still may not point upward.
"""

from __future__ import annotations

import ast
import functools
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "arena"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("arena._version", "arena.trust"),
    ("arena.privacy",),
    ("arena.contracts",),
    ("arena.engine",),
    ("arena.hookspecs", "arena.registry", "arena.session", "arena.plugins"),
    ("arena.pipeline",),
    ("arena.results",),
    ("arena.games",),
    ("arena.api", "arena.cli", "arena.commands"),
    ("arena",),  # the facade (arena/__init__.py), which may import anything lazily
)
"""Lowest first. A module may import modules of its own layer and of lower ones. The contracts sit below the engine:
they reach it only through their protocol (``arena.contracts.engine.TrainingEngine``), which the engine implements
and the package's root installs, so a plugin written against them does not move with the engine. Games sit above
the run and the results (they use the training procedure, the store and the leaderboard's helpers); the core below
them names no game and reaches games only through the registry."""

MAX_LINES = 450
LONG_MODULES: dict[str, str] = {
    # "arena/some/module.py": "why it must stay over the limit",
}
"""Modules allowed over ``MAX_LINES``, each with its reason."""


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    file: str
    line: int
    type_only: bool
    how: str

    def __str__(self) -> str:
        kind = " (type-only)" if self.type_only else ""
        return f"{self.file}:{self.line}: {self.source} -> {self.target}{kind} [{self.how}]"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def discover(package: Path) -> dict[str, Path]:
    """Every module of the package (``arena.x.y`` → its file)."""
    return {module_name(p, package.parent): p for p in sorted(package.rglob("*.py"))}


_REFERENCE = re.compile(r"arena(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?::[A-Za-z_][A-Za-z0-9_.]*)?")


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _is_import_module(call: ast.Call) -> bool:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    return name in ("import_module", "__import__")


class _Scanner(ast.NodeVisitor):
    def __init__(self, source: str, file: str, is_package: bool, modules: set[str]) -> None:
        self.source, self.file, self.modules = source, file, modules
        self.package = source if is_package else source.rpartition(".")[0]
        self.type_only = 0
        self.edges: list[Edge] = []
        self._strings_seen: set[int] = set()

    def _add(self, target: str, node: ast.AST, how: str) -> None:
        # The deepest known module the name lies in: "arena.games.membership.rule" or, for "arena.x.Name", arena.x.
        while target and target not in self.modules:
            target = target.rpartition(".")[0]
        if target and target != self.source:
            self.edges.append(Edge(self.source, target, self.file, node.lineno, self.type_only > 0, how))

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self.type_only += 1
            for child in node.body:
                self.visit(child)
            self.type_only -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "arena" or alias.name.startswith("arena."):
                self._add(alias.name, node, "import")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            base = f"{base}.{node.module}" if node.module else base
        else:
            base = node.module or ""
        if not (base == "arena" or base.startswith("arena.")):
            return
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            # `from arena.pipeline import store` imports arena.pipeline.store; `from arena import Model`, the facade.
            self._add(sub if sub in self.modules else base, node, "from-import")

    def visit_Call(self, node: ast.Call) -> None:
        if _is_import_module(node) and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                self._strings_seen.add(id(arg))
                if arg.value == "arena" or arg.value.startswith("arena."):
                    self._add(arg.value, node, "import_module")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if id(node) in self._strings_seen or not isinstance(node.value, str):
            return
        text = node.value
        # A module named in a string ("arena.games.membership.rule:audit_game", ("arena.api", "run")), not the
        # bare word "arena", which is the project's name in prose and logger names.
        if text != "arena" and _REFERENCE.fullmatch(text):
            self._add(text.partition(":")[0], node, "string reference")


def scan(source: str, tree: ast.AST, file: str, is_package: bool, modules: set[str]) -> list[Edge]:
    scanner = _Scanner(source, file, is_package, modules)
    scanner.visit(tree)
    return scanner.edges


@functools.cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


@functools.cache
def package_edges() -> tuple[Edge, ...]:
    """Every edge of the package, once per (file, line, target)."""
    found = discover(PACKAGE)
    edges: set[Edge] = set()
    for name, path in found.items():
        rel = str(path.relative_to(ROOT))
        edges.update(scan(name, parsed(path), rel, path.name == "__init__.py", set(found)))
    return tuple(sorted(edges, key=str))


def layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for layer, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            inside = module == prefix or (prefix != "arena" and module.startswith(prefix + "."))
            if inside and (best is None or len(prefix) > best[0]):
                best = (len(prefix), layer)
    return None if best is None else best[1]


def cycles(edges: list[Edge]) -> list[list[Edge]]:
    """The edges inside each strongly connected component of more than one module (Tarjan, iteratively)."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.source, set()).add(e.target)
        graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[set[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(component)
    return [sorted((e for e in edges if e.source in c and e.target in c), key=str) for c in components]


# --- the package itself ---


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(m for m in discover(PACKAGE) if layer_of(m) is None)
    assert not unplaced, f"modules in no layer of LAYERS (place them): {unplaced}"


def test_no_upward_imports() -> None:
    upward = [
        e for e in package_edges()
        if (src := layer_of(e.source)) is not None and (dst := layer_of(e.target)) is not None and dst > src
    ]
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(
        f"  {e}   (layer {layer_of(e.source)} -> {layer_of(e.target)})" for e in sorted(upward, key=str)
    )


def test_the_core_names_no_game() -> None:
    """The run and the results reach games only through the registry (implied by the layers; stated on its own
    so that a failure says what it means)."""
    core = ("arena.pipeline", "arena.results", "arena.engine", "arena.privacy", "arena.contracts")
    offending = [
        e for e in package_edges()
        if e.source.startswith(core) and (e.target == "arena.games" or e.target.startswith("arena.games."))
    ]
    assert not offending, "the core names a game:\n" + "\n".join(f"  {e}" for e in sorted(offending, key=str))


def test_the_contracts_never_import_the_engine() -> None:
    """The plugin contracts reach the engine only through ``arena.contracts.engine.TrainingEngine`` (implied by the
    layers; stated on its own so that a failure says what it means): no import of ``arena.engine`` from a contract
    module, lazy, type-only or by name."""
    offending = [
        e for e in package_edges()
        if e.source.startswith("arena.contracts")
        and (e.target == "arena.engine" or e.target.startswith("arena.engine."))
    ]
    assert not offending, "a contract imports the engine:\n" + "\n".join(f"  {e}" for e in sorted(offending, key=str))


def test_the_engine_check_catches_a_lazy_import() -> None:
    """The scan behind the check above sees an import inside a function and one under ``TYPE_CHECKING``."""
    modules = {"arena.contracts.x", "arena.engine.trainer"}
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from arena.engine.trainer import A\n"
                     "def f():\n    import arena.engine.trainer\n")
    edges = scan("arena.contracts.x", tree, "x.py", False, modules)
    assert {(e.target, e.type_only) for e in edges} == {("arena.engine.trainer", True), ("arena.engine.trainer", False)}
    assert all(layer_of(e.target) > layer_of(e.source) for e in edges)  # type: ignore[operator]


def test_no_import_cycles() -> None:
    found = cycles([e for e in package_edges() if not e.type_only])
    assert not found, "import cycles (each block: the edges among one cycle's modules):\n" + "\n\n".join(
        "\n".join(f"  {e}" for e in component) for component in found
    )


def test_no_plugin_imports_from_the_package() -> None:
    """The built-in plugins load through entry points like third-party ones: the package never names them."""
    offending = []
    for name, path in discover(PACKAGE).items():
        for node in ast.walk(parsed(path)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if any(n == "arena_plugins" or n.startswith("arena_plugins.") for n in names):
                offending.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name} -> {names}")
    assert not offending, "\n".join(offending)


def test_modules_are_short() -> None:
    too_long = {}
    for name, path in discover(PACKAGE).items():
        rel = str(path.relative_to(ROOT))
        if name == "arena" or rel in LONG_MODULES:
            continue
        n = len(path.read_text().splitlines())
        if n > MAX_LINES:
            too_long[rel] = n
    assert not too_long, f"modules over {MAX_LINES} lines (split them): " + ", ".join(
        f"{f} ({n})" for f, n in sorted(too_long.items())
    )


def test_long_module_allowances_are_still_needed() -> None:
    stale = [f for f in LONG_MODULES
             if not (ROOT / f).exists() or len((ROOT / f).read_text().splitlines()) <= MAX_LINES]
    assert not stale, f"allowances no longer needed (remove them from LONG_MODULES): {stale}"


# --- the scanner, on code written to exercise each kind of edge ---

MODULES = {"arena", "arena.a", "arena.a.one", "arena.a.two", "arena.b", "arena.b.rule", "arena.c"}


def _edges(source: str, text: str, is_package: bool = False) -> set[tuple[str, bool, str]]:
    tree = ast.parse(textwrap.dedent(text))
    return {(e.target, e.type_only, e.how) for e in scan(source, tree, "x.py", is_package, MODULES)}


def test_scanner_finds_every_kind_of_edge() -> None:
    found = _edges("arena.a.one", """
        import importlib
        import numpy
        from typing import TYPE_CHECKING
        import arena.c
        from arena import b, Thing
        from . import two
        from ..b.rule import audit

        if TYPE_CHECKING:
            from arena.b import Hint

        def lazy():
            from arena.c import helper
            return importlib.import_module("arena.b.rule")

        class G:
            audit_rule = "arena.b.rule:audit_game"
            exports = {"x": ("arena.c", "x")}
            label = "arena"
        """)
    assert found == {
        ("arena.c", False, "import"),
        ("arena.b", False, "from-import"),  # a submodule imported by name
        ("arena", False, "from-import"),  # a name from the facade
        ("arena.a.two", False, "from-import"),
        ("arena.b.rule", False, "from-import"),
        ("arena.b", True, "from-import"),
        ("arena.c", False, "from-import"),
        ("arena.b.rule", False, "import_module"),
        ("arena.b.rule", False, "string reference"),
        ("arena.c", False, "string reference"),
    }


def test_scanner_resolves_relative_imports_in_a_package() -> None:
    assert _edges("arena.a", "from .one import x\nfrom .. import c\n", is_package=True) == {
        ("arena.a.one", False, "from-import"), ("arena.c", False, "from-import"),
    }


def test_cycle_and_layer_checks_catch_what_they_should() -> None:
    def edge(s: str, t: str, type_only: bool = False) -> Edge:
        return Edge(s, t, "x.py", 1, type_only, "import")

    found = cycles([edge("a", "b"), edge("b", "c"), edge("c", "a"), edge("c", "d"), edge("d", "e")])
    assert [sorted({e.source for e in c}) for c in found] == [["a", "b", "c"]]
    assert cycles([edge("a", "b"), edge("b", "c")]) == []
    assert layer_of("arena") == 9 and layer_of("arena._version") == 0
    assert layer_of("arena.games.membership.rule") == 7 and layer_of("arena.pipeline.store") == 5
    assert layer_of("arena.plugins") == 4 and layer_of("arena.results.report.html") == 6
    assert layer_of("arena.contracts.engine") == 2 and layer_of("arena.engine.trainer") == 3
    assert layer_of("arena.nowhere") is None

