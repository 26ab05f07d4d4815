"""A matchup's saved arrays (the scores and secrets its game kept, ``Outcome.arrays``) as the results read them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

ArrayLoader = Callable[[str], Mapping[str, Any] | None]
"""``arrays(key)``: the saved arrays of the matchup ``key`` (name → numpy array), None when it saved none."""
