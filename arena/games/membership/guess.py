"""What a membership attack returns: a score per challenge point."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MembershipGuess:
    """One score per challenge point (higher means member) and the attack's own hard decisions."""

    scores: np.ndarray
    decisions: np.ndarray
