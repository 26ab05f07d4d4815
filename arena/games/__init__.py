"""Games: the challenger's protocols. Each owns the secret, builds the attacker's view and scores the guess."""

from arena.games.base import Game
from arena.games.membership import MembershipGame
from arena.games.reconstruction import ReconstructionGame

GAMES: dict[str, type[Game]] = {MembershipGame.name: MembershipGame, ReconstructionGame.name: ReconstructionGame}
