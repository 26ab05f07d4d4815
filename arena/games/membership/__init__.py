"""The membership game: members vs non-members of the released model's training set, one score per point.

This folder owns the game's spec and view (``game``), its metrics (``metrics``), its audit rule (``audit``) and
its report section (``report`` and ``templates/``)."""

from arena.games.membership.game import MembershipGame, MembershipGameSpec, MembershipView

__all__ = ["MembershipGame", "MembershipGameSpec", "MembershipView"]
