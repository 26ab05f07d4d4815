"""The language game: membership of documents in a causal language model's fine-tuning set, with a challenger-drawn
split, and the exposure of canaries inserted 1 to 100 times (Carlini et al.'s secret sharer).

``game`` plays it (the membership game's split and scoring, text utility), ``spec`` holds its spec and view,
``query`` the text black box and the per-token log-probabilities attacks read, ``exposure`` the canaries."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from arena.games.language.game import LanguageGame
    from arena.games.language.spec import LanguageGameSpec, LanguageView

__all__ = ["LanguageGame", "LanguageGameSpec", "LanguageView"]

_HOMES = {
    "LanguageGame": "arena.games.language.game",
    "LanguageGameSpec": "arena.games.language.spec",
    "LanguageView": "arena.games.language.spec",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
