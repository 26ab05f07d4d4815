"""The run: scenario files planned into matchups, matchups played (in the attack sandbox, serially or on Ray), rows
stored in the run directory.

Importing it installs the attack sandbox's catalog into the plugin loader (``arena.catalog_slot``): in every
process that plans, plays or reads a run, a third-party plugin that registers attacks only is imported only in the
sandbox (``arena.pipeline.sandbox.catalog``). Registries built before that, in whatever order modules were
imported, hold no third-party code but what the user trusts by name (``arena.plugins.load_plugins``): they are
built again.
"""

from __future__ import annotations

import sys
from typing import Any

from arena.catalog_slot import set_catalog


def _catalog(entry_points: list[Any]) -> Any:
    from arena.pipeline.sandbox.catalog import catalog

    return catalog(entry_points)


set_catalog(_catalog)
if "arena.plugins" in sys.modules:  # registries built before (without a catalog) left third-party code out
    sys.modules["arena.plugins"].registries.cache_clear()
