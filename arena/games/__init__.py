"""Games: the challenger's protocols. Each owns the secret, builds the attacker's view and scores the guess.

Games are plugins (hook ``register_games``); each lives in its own folder (``arena/games/<game>/``). The built-in
ones are registered by the ``games`` entry point of privacy-arena, like any third-party game. The contracts below
are imported when first asked for, so that a game's audit rule and report parts import no torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from arena.contracts.game import Game, Outcome
    from arena.contracts.view import ThreatModelError, View

__all__ = ["Game", "Outcome", "ThreatModelError", "View"]

_HOMES = {"Game": "arena.contracts.game", "Outcome": "arena.contracts.game", "ThreatModelError": "arena.contracts.view",
          "View": "arena.contracts.view"}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
