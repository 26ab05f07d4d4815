"""Which code a plugin's results come from: its name and version, the distribution that registered it, and, for a
distribution installed from a local path or in editable mode, a hash of its source files.

A matchup's key covers the provenance of every plugin that shapes it (game, dataset, model, defense, attack), so
bumping a plugin's ``version``, upgrading its distribution or editing a locally installed plugin's source gives
its matchups new keys: they are played (and their releases trained) again, and the rows of the old code are
superseded, never averaged in.

The source hashed is the module that defines the plugin's class and the modules of its top-level package that it
imports (transitively, read from the import statements, function-level ones included), so an edit retrains what
it changes and nothing else. For a class of the arena itself (the built-in games) the scope is the class's own
package (the game's folder): the rest of the harness is covered by the arena's version, recorded in every row.
Hashes are computed once per module object per process.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata as md
import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arena import trust

HARNESS = "arena"
SOURCE_DIGITS = 16


@dataclass(frozen=True)
class Provenance:
    """One plugin as it ran: its registered ``name`` and ``version`` (the class attribute), the ``distribution``
    that registered it and its version, how that distribution is installed (``editable``, ``local``: from a local
    directory or archive, ``index``: from a package index or VCS, ``unknown``: no metadata) and, for editable,
    local and unknown installs, ``source``: a hash of the plugin's source files (None otherwise). A plugin whose
    module is imported from outside any ``site-packages`` counts as local, whatever its metadata says."""

    name: str
    version: str
    distribution: str
    dist_version: str
    install: str
    source: str | None

    def identity(self) -> dict[str, Any]:
        """What a matchup key takes from this plugin."""
        return {"name": self.name, "version": self.version, "distribution": self.distribution,
                "dist_version": self.dist_version, "source": self.source}

    def describe(self) -> str:
        """'privacy-arena 0.1.0 / membership v1': the distribution and the plugin, as a row's ``versions`` says."""
        return f"{self.distribution} {self.dist_version} / {self.name} v{self.version}"

    def versions(self, kind: str) -> dict[str, str]:
        """A row's ``versions`` entries for this plugin: ``kind`` (``describe``) and, with a source hash,
        ``<kind>.source``: 'sha256:1a2b3c4d5e6f7a8b (editable)'."""
        out = {kind: self.describe()}
        if self.source:
            out[f"{kind}.source"] = f"sha256:{self.source} ({self.install})"
        return out


def install_kind(distribution: str) -> str:
    """How ``distribution`` is installed, read from its ``direct_url.json`` (PEP 610) in any of its metadata
    folders on the path (a source tree's ``.egg-info`` may shadow the installed ``.dist-info``): ``editable``,
    ``local`` (a local directory or a ``file:`` archive), ``index`` (a package index or a remote URL) or
    ``unknown`` (no metadata)."""
    kinds = set()
    found = list(md.distributions(name=distribution))
    site = trust.site_in_use()
    if not found and site is not None:  # an untrusted attack's: read from the untrusted site's metadata
        found = list(md.distributions(name=distribution, path=[site]))
    for dist in found:
        try:
            direct = json.loads(dist.read_text("direct_url.json") or "null")
        except json.JSONDecodeError:
            direct = None
        if not isinstance(direct, dict):
            kinds.add("index")
            continue
        info = direct.get("dir_info")
        if isinstance(info, dict):
            kinds.add("editable" if info.get("editable") else "local")
        else:
            kinds.add("local" if str(direct.get("url", "")).startswith("file:") else "index")
    return next((k for k in ("editable", "local", "index") if k in kinds), "unknown")


def _in_install_dir(module: str) -> bool:
    """Whether the module's file lies in an installation folder (``site-packages``), where only an install
    changes it; a module elsewhere is read from a source tree that may be edited at any time."""
    origin = _origin(module)
    return origin is None or bool({"site-packages", "dist-packages"} & set(origin.parts))


def _origin(name: str) -> Path | None:
    """The .py file of module ``name`` (a package's ``__init__.py``), or None (not found, not Python source)."""
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None) if module is not None else None
    if path is None:
        try:
            spec = _find_spec(name)
        except (ImportError, ValueError, AttributeError):
            return None
        path = spec.origin if spec is not None else None
    return Path(path) if path and str(path).endswith(".py") and Path(path).is_file() else None


def _find_spec(name: str) -> Any:
    """The spec of module ``name``, found along the import path without importing anything, not even its parent
    packages (an attack's package is imported only in the sandbox: its ``__init__`` must not run here)."""
    from importlib.machinery import PathFinder

    spec, search = None, None
    parts = name.split(".")
    for i in range(len(parts)):
        part = ".".join(parts[: i + 1])
        loaded = sys.modules.get(part)
        spec = getattr(loaded, "__spec__", None) if loaded is not None else PathFinder.find_spec(
            part, search if search is not None else _search_path())
        if spec is None:
            return None
        search = spec.submodule_search_locations
        if search is None and i < len(parts) - 1:
            return None
    return spec


def _search_path() -> list[str]:
    """Where top-level modules are looked for: the import path, then the untrusted site (whose attacks' sources
    are hashed like any other plugin's: read, never imported here)."""
    site = trust.site_in_use()
    return sys.path + ([site] if site is not None else [])


class SourceError(ValueError):
    """A plugin's source file the parser cannot read (a syntax error, nesting past the parser's limits): its
    provenance cannot be computed, so the scenario that uses it is refused."""


def _is_package(name: str, origin: Path) -> bool:
    return origin.name == "__init__.py" or hasattr(sys.modules.get(name), "__path__")


def _imported(name: str, origin: Path) -> set[str]:
    """Every module name an import statement of the file may bring in (``from a import b``: ``a`` and ``a.b``)."""
    try:
        source = origin.read_bytes()
    except OSError:
        return set()
    try:
        tree = ast.parse(source, filename=str(origin))
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:  # any parser failure, nesting included
        # refused, not skipped: a file the parser cannot read here might still import in an attack's process (a
        # raised recursion limit), and the modules it imports would then escape the provenance hash
        why = exc.msg if isinstance(exc, SyntaxError) and exc.msg else (str(exc) or type(exc).__name__)
        raise SourceError(f"cannot parse {origin}: {type(exc).__name__}: {why}"[:400]) from None
    package = name if _is_package(name, origin) else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                try:
                    base = importlib.util.resolve_name("." * node.level + base, package)
                except (ImportError, ValueError):
                    continue
            if base:
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return found


def _scope(module: str) -> str:
    """The package whose modules count as the plugin's source: its top-level package, or, for a class of the arena
    itself, the class's own package."""
    if module.split(".")[0] == HARNESS:
        return module.rpartition(".")[0] or module
    return module.split(".")[0]


def _within(name: str, scope: str) -> bool:
    return name == scope or name.startswith(scope + ".")


def source_files(module: str) -> dict[str, Path]:
    """Module name → file: ``module`` and the modules of its scope it imports, transitively, with the packages
    that hold them (their ``__init__.py``)."""
    scope = _scope(module)
    files: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in files or not _within(name, scope):
            continue
        origin = _origin(name)
        if origin is None:
            continue
        files[name] = origin
        parent = name.rpartition(".")[0]
        if parent:
            todo.append(parent)
        todo.extend(_imported(name, origin))
    return files


_HASHES: dict[tuple[str, int], str | None] = {}


def source_hash(module: str) -> str | None:
    """A hash of the source files of ``module`` (``source_files``), once per module object per process; None
    when it has no Python source."""
    memo = (module, id(sys.modules.get(module)))
    if memo not in _HASHES:
        files = source_files(module)
        if not files:
            _HASHES[memo] = None
        else:
            h = hashlib.sha256()
            for name in sorted(files):
                h.update(f"{name}\0".encode())
                h.update(files[name].read_bytes())
                h.update(b"\0")
            _HASHES[memo] = h.hexdigest()[:SOURCE_DIGITS]
    return _HASHES[memo]


def clear_cache() -> None:
    """Forget the hashes computed (tests that edit a plugin's source and load it again)."""
    _HASHES.clear()


def provenance(entry: Any, *, module: str | None = None, version: str | None = None) -> Provenance:
    """The provenance of a registry entry (``arena.registry.Entry``) holding a plugin class. An attack's ``module``
    and ``version`` are given as read statically (``arena.pipeline.sandbox.static``): nothing of its class runs
    here."""
    if module is None or version is None:
        cls = entry.obj if isinstance(entry.obj, type) else type(entry.obj)
        module = cls.__module__ if module is None else module
        version = str(getattr(cls, "version", "")) if version is None else version
    install = install_kind(entry.distribution)
    if install == "index" and not _in_install_dir(module):
        install = "local"  # imported from a source tree although its metadata says otherwise
    source = source_hash(module) if install in ("editable", "local", "unknown") else None
    return Provenance(entry.name, version, entry.distribution, entry.version, install, source)


def track_provenance(track: Any, regs: Any) -> dict[str, Provenance]:
    """The provenance of a track's (``arena.contracts.spec.Track``) game, dataset and model plugins, by kind, for
    those the registries (``arena.plugins.Registries``) hold."""
    code = {}
    for kind, name, registry in (("game", track.game.name, regs.games), ("dataset", track.dataset.name,
                                 regs.datasets), ("model", track.model.name, regs.models)):
        if name in registry:
            code[kind] = provenance(registry.entry(name))
    return code
