"""Bounds on what a scenario may ask for, checked at validation: how many matchups a plan may expand to (an
override in the environment for the rare scenario that needs more)."""

from __future__ import annotations

import math
import os
from collections.abc import Sized

MAX_MATCHUPS = 100_000
"""Most matchups one plan may expand to, unless ``ARENA_MAX_MATCHUPS`` says otherwise."""
MATCHUPS_ENV = "ARENA_MAX_MATCHUPS"


def max_matchups() -> int:
    """The matchup cap: ``ARENA_MAX_MATCHUPS`` where it is a positive integer, ``MAX_MATCHUPS`` otherwise."""
    text = os.environ.get(MATCHUPS_ENV, "")
    return int(text) if text.isdigit() and 0 < len(text) <= 12 and int(text) > 0 else MAX_MATCHUPS


def too_many(source: str, track: int, planned: int, *axes: Sized) -> str | None:
    """The problem when track ``track``'s matchups (the product of its ``axes``' lengths: defenses, attacks,
    seeds) would take the plan's ``planned`` past the cap, or None."""
    cap, more = max_matchups(), math.prod(len(a) for a in axes)
    if planned + more <= cap:
        return None
    return (f"{source}: tracks[{track}]: expands to {more} matchups ({planned + more} in all), more than "
            f"the {cap} a run may have; use fewer seeds, defenses or attacks, or set {MATCHUPS_ENV} to allow more")
