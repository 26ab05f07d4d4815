"""The membership game: members vs non-members of the released model's training set, one score per point.

This folder owns the game's spec and view (``game``), its metrics (``metrics``), its guess type (``guess``), its shadow
pools (``pools``), its audit rule (``rule``) and its report section (``sections``, ``figures`` and ``templates/``)."""

from arena.games.membership.game import MembershipGame, MembershipGameSpec, MembershipView
from arena.games.membership.guess import MembershipGuess

__all__ = ["MembershipGame", "MembershipGuess", "MembershipGameSpec", "MembershipView"]
