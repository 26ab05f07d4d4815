"""The audit game: K released models of the defense under test, trained in one batched call with canaries each
included independently with probability ½; the attack (an auditor) scores the canaries and the game bounds ε.

This folder owns the game's spec, view, guess and metrics (``game``), its canaries (``canaries``), its audit rule
(``rule``) and its report section (``sections`` and ``templates/``)."""

from arena.games.audit.game import METRICS, AuditGame, AuditGameSpec, AuditView, CanaryGuess

__all__ = ["METRICS", "AuditGame", "AuditGameSpec", "AuditView", "CanaryGuess"]
