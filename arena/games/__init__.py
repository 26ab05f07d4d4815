"""Games: the challenger's protocols. Each owns the secret, builds the attacker's view and scores the guess.

Games are plugins (hook ``register_games``); each lives in its own folder (``arena/games/<game>/``). The built-in
ones are registered by the ``games`` entry point of privacy-arena, like any third-party game. The contracts below
are imported when first asked for, so that a game's audit rule and report parts import no torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from arena.contracts.game import Game, Outcome
    from arena.contracts.view import ThreatModelError, View

__all__ = ["Game", "Outcome", "ThreatModelError", "View"]

_HOMES = {"Game": "arena.contracts.game", "Outcome": "arena.contracts.game", "ThreatModelError": "arena.contracts.view",
          "View": "arena.contracts.view"}


def lazy_attributes(module: str, homes: dict[str, str]) -> Callable[[str], Any]:
    """A package's ``__getattr__`` that imports each name of ``homes`` from its module when first asked for (a game
    package's classes need torch; its audit rule and report parts, which a leaderboard imports, do not)."""
    def attribute(name: str) -> Any:
        if name in homes:
            return getattr(importlib.import_module(homes[name]), name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return attribute


__getattr__ = lazy_attributes(__name__, _HOMES)
