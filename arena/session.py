"""The session: what one arena process works with, as one object (the attack sandbox's catalog, the plugin
registries built with it) instead of state that modules set up as a side effect of being imported.

The package's root (``arena/__init__.py``) establishes the process's session before any other arena module runs,
with the attack sandbox's catalog in it; so no order of imports lets ``arena.plugins.registries()`` import a
third-party distribution that registers attacks only into the caller's process (it is imported only in the
sandbox, ``arena.pipeline.sandbox.catalog``). A caller that wants other settings builds a ``Session`` and passes
it (``arena.plugins.registries(session)``, ``build_registries(session)``), or establishes it for the process.
This module imports nothing heavy: a process that only reads rows (``arena leaderboard``) never imports torch or
the plugin machinery through it.
"""

from __future__ import annotations

import importlib.metadata as md
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from arena.plugins import Registries

Catalog = Callable[[list[md.EntryPoint]], "dict[str, dict[str, Any]] | None"]
"""What the attack sandbox (``arena.pipeline.sandbox.catalog``) makes of third-party entry points, each loaded in
a sandboxed process: per ``distribution:name``, the hooks it implements (``kinds``), its attacks' declarations
read statically (``attacks``) or why it failed (``error``, ``registry_error``); None: load them all here."""


@dataclass(eq=False)
class Session:
    """One process's plugin settings and what was built from them.

    ``catalog``: the attack sandbox's catalog; a third-party entry point that registers attacks only is then never
    imported in this process. None (a session built without a sandbox, e.g. for a test of the loader): only the
    distributions trusted by name (``arena.trust``) are imported, nothing else. ``registries``: the plugin
    registries built for this session (by ``arena.plugins.registries``, on first use), with the plugin manager
    and the loaded distributions in them."""

    catalog: Catalog | None = None
    registries: Registries | None = field(default=None, repr=False)

    def forget(self) -> None:
        """Drop what was built (the registries): the next use builds it again, e.g. after the names trusted
        (``ARENA_TRUSTED``) changed, or in a forked sandbox process."""
        self.registries = None


_current: list[Session] = []


def establish(session: Session) -> Session:
    """Make ``session`` the process's session (what ``current()`` returns); returns the one it replaces (a new
    empty session if there was none), so that a caller can put it back."""
    previous = _current[0] if _current else Session()
    _current[:] = [session]
    return previous


def current() -> Session:
    """The process's session: the one the package's root established, or one established since."""
    if not _current:
        raise RuntimeError("no arena session is established (importing arena establishes one)")
    return _current[0]
