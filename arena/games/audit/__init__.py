"""The audit game: K released models of the defense under test, trained in one batched call with canaries each
included independently with probability ½; the attack (an auditor) scores the canaries and the game bounds ε.

This folder owns the game's spec, view, guess and metrics (``game``), its canaries (``canaries``), its audit rule
(``rule``) and its report section (``sections`` and ``templates/``).

Its classes are imported when first asked for: its audit rule and report parts, which a leaderboard or a report
imports, need no torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arena.games import lazy_attributes

if TYPE_CHECKING:
    from arena.games.audit.game import METRICS, AuditGame, AuditGameSpec, AuditView, CanaryGuess

__all__ = ["METRICS", "AuditGame", "AuditGameSpec", "AuditView", "CanaryGuess"]

_HOMES = {
    "METRICS": "arena.games.audit.game",
    "AuditGame": "arena.games.audit.game",
    "AuditGameSpec": "arena.games.audit.game",
    "AuditView": "arena.games.audit.game",
    "CanaryGuess": "arena.games.audit.game",
}


__getattr__ = lazy_attributes(__name__, _HOMES)
