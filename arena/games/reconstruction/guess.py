"""What a reconstruction attack returns: a record per target."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ReconstructionGuess:
    """One reconstructed record per target, and a label per target when the attack recovers labels."""

    records: np.ndarray
    labels: np.ndarray | None = None
