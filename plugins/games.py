"""The built-in games, registered through the ``games`` entry point exactly like a third-party game."""

from __future__ import annotations

from arena import AuditGame, GradientsGame, LanguageGame, MembershipGame, ReconstructionGame, hookimpl


@hookimpl
def register_games(register) -> None:  # noqa: ANN001 - the registry's callback
    register(MembershipGame)
    register(ReconstructionGame)
    register(AuditGame)
    register(GradientsGame)
    register(LanguageGame)
