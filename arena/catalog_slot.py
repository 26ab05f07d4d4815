"""The slot through which the attack sandbox's catalog reaches the plugin loader: a module of no dependencies, so
that installing the catalog (``arena.pipeline`` does on import) does not import the plugin machinery (torch and
the contracts) into a process that only reads rows, such as ``arena leaderboard``."""

from __future__ import annotations

import importlib.metadata as md
from collections.abc import Callable
from typing import Any

Catalog = Callable[[list[md.EntryPoint]], "dict[str, dict[str, Any]] | None"]
"""What the attack sandbox (``arena.pipeline.sandbox.catalog``) makes of third-party entry points, each loaded in
a sandboxed process: per ``distribution:name``, the hooks it implements (``kinds``), its attacks' declarations
read statically (``attacks``) or why it failed (``error``, ``registry_error``); None: load them all here."""
_installed: list[Catalog] = []


def set_catalog(catalog: Catalog) -> None:
    """Install the attack sandbox's catalog: from then on a third-party entry point that registers attacks only is
    never imported in this process."""
    _installed[:] = [catalog]


def installed_catalog() -> Catalog | None:
    """The catalog installed, if any. Without one, the plugin loader imports no third-party distribution but those
    trusted by name (``arena.trust``): no order of imports brings attack code into the caller's process."""
    return _installed[0] if _installed else None
