"""A data-independent partition of records for parallel composition: each record's cell is a hash of the record
alone (its features as float64 and its label), so adding or removing one record moves no other record between
cells, and a defense that runs one DP mechanism per cell at ε each is ε-DP (parallel composition, add/remove).

A defense draws it with ``hash_partition``; inside an audit the engine notes the number of cells, and the claim
check recomputes the cells from the data it handed the defense, so it can verify that each ``train`` call trained
on exactly one cell (``arena.games.audit.claim_check``). Any other split (by a feature's median, by a sort of the
data, by a seed drawn after looking at it) cannot be verified, and the check says so rather than compose it."""

from __future__ import annotations

import numpy as np
import torch

from arena.engine import instruments
from arena.engine.digests import digest_cells, record_digests


def hash_partition(X: torch.Tensor, y: torch.Tensor, parts: int) -> list[torch.Tensor]:
    """The indices of the records X [n, ...], y [n] in each of ``parts`` cells (a record's cell is a hash of the
    record alone, fixed before any data is seen); inside an audit the number of cells is noted for the check."""
    if parts < 1:
        raise ValueError("need parts >= 1")
    cells = digest_cells(record_digests(X, y), parts)
    instruments.record_partition(parts)
    return [torch.as_tensor(np.flatnonzero(cells == c), dtype=torch.int64, device=X.device) for c in range(parts)]
