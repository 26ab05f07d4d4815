"""The reconstruction game (Balle, Cherubin & Hayes 2022): an informed adversary who knows D⁻ rebuilds the target.

This folder owns the game's spec, view and metrics (``game``), its guess type (``guess``), its bounds on
reconstruction success (``bounds``), its audit rule (``rule``) and its report section (``sections``, ``grids`` and
``templates/``).

Its classes are imported when first asked for: its audit rule and report parts, which a leaderboard or a report
imports, need no torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arena.games import lazy_attributes

if TYPE_CHECKING:
    from arena.games.reconstruction.game import (
        METRICS,
        ReconstructionGame,
        ReconstructionGameSpec,
        ReconstructionView,
        distinct_rows,
        kappa_estimate,
        nearest_neighbours,
        pairwise_mse,
        prior_mass,
        reconstruction_metrics,
        row_mse,
    )
    from arena.games.reconstruction.guess import ReconstructionGuess

__all__ = ["METRICS", "ReconstructionGame", "ReconstructionGuess", "ReconstructionGameSpec", "ReconstructionView",
           "distinct_rows", "kappa_estimate", "nearest_neighbours", "pairwise_mse", "prior_mass",
           "reconstruction_metrics", "row_mse"]

_HOMES = {
    "METRICS": "arena.games.reconstruction.game",
    "ReconstructionGame": "arena.games.reconstruction.game",
    "ReconstructionGameSpec": "arena.games.reconstruction.game",
    "ReconstructionView": "arena.games.reconstruction.game",
    "distinct_rows": "arena.games.reconstruction.game",
    "kappa_estimate": "arena.games.reconstruction.game",
    "nearest_neighbours": "arena.games.reconstruction.game",
    "pairwise_mse": "arena.games.reconstruction.game",
    "prior_mass": "arena.games.reconstruction.game",
    "reconstruction_metrics": "arena.games.reconstruction.game",
    "row_mse": "arena.games.reconstruction.game",
    "ReconstructionGuess": "arena.games.reconstruction.guess",
}


__getattr__ = lazy_attributes(__name__, _HOMES)
