"""The membership game: members vs non-members of the released model's training set, one score per point.

This folder owns the game (``game``), its spec and view (``spec``), the vulnerable-record protocol
(``vulnerable``), its metrics (``metrics``), its guess type (``guess``), its shadow
pools (``pools``), its audit rule (``rule``) and its report section (``sections``, ``figures`` and ``templates/``).

Its classes are imported when first asked for: its audit rule and report parts, which a leaderboard or a report
imports, need no torch."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from arena.games.membership.game import MembershipGame
    from arena.games.membership.guess import MembershipGuess
    from arena.games.membership.spec import MembershipGameSpec, MembershipView

__all__ = ["MembershipGame", "MembershipGuess", "MembershipGameSpec", "MembershipView"]

_HOMES = {
    "MembershipGame": "arena.games.membership.game",
    "MembershipGameSpec": "arena.games.membership.spec",
    "MembershipView": "arena.games.membership.spec",
    "MembershipGuess": "arena.games.membership.guess",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
