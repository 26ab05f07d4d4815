"""What a gradient-inversion attack returns: one reconstruction per record of the update."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class GradientsGuess:
    """``records`` [n_records, n_features]: one reconstruction per record summed in the update (in any order);
    ``labels`` [n_records]: the label of each, when the attack recovers labels."""

    records: np.ndarray
    labels: np.ndarray | None = None
