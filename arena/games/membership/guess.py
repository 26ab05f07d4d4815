"""What a membership attack returns: a score per challenge point."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MembershipGuess:
    """One score per challenge point (higher means member) and the attack's own hard decisions; ``references``:
    how many reference records a score ranks a point against, where it does (RMIA's |Z|), so a reader sees
    the score's resolution (the game records it as the metric ``reference_points``)."""

    scores: np.ndarray
    decisions: np.ndarray
    references: int | None = None
