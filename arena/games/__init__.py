"""Games: the challenger's protocols. Each owns the secret, builds the attacker's view and scores the guess.

Games are plugins (hook ``register_games``); each lives in its own folder (``arena/games/<game>/``). The built-in
ones are registered by the ``games`` entry point of privacy-arena, like any third-party game.
"""

from arena.contracts.game import Game, Outcome
from arena.contracts.view import ThreatModelError, View

__all__ = ["Game", "Outcome", "ThreatModelError", "View"]
