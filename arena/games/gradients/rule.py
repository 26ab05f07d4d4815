"""The gradients game's audit rule: each trial's target success beside the success the client's claim allows.

The rows carry κ (estimated over the client pool), the success rate over the trials' targets and their number
(``n_targets``), and the update defense's claim (client DP-SGD records σ, q = 1 and the local steps): the
reconstruction game's rule audits them as it audits its own, Balle et al.'s e^ε·κ + δ beside Hayes, Mahloujifar &
Balle 2023's tighter bound (``arena.games.reconstruction.rule``; the formulas are not repeated here).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from arena.games.reconstruction.rule import audit_reconstruction
from arena.results.audit import ArrayLoader, GameAudit


def as_reconstruction(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row with its targets' success as the reconstruction rule reads it (``success_rate``)."""
    metrics = dict(row.get("metrics") or {})
    metrics["success_rate"] = metrics.get("target_success_rate")
    return {**row, "metrics": metrics}


def audit_game(rows: Sequence[Mapping[str, Any]], arrays: ArrayLoader) -> GameAudit:
    """Audit every claiming gradients row that reports κ (from its metrics alone)."""
    records = tuple(a for a in (audit_reconstruction(as_reconstruction(row)) for row in rows) if a is not None)
    return GameAudit(game="gradients", records=records)
