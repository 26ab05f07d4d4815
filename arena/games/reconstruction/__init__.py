"""The reconstruction game (Balle, Cherubin & Hayes 2022): an informed adversary who knows D⁻ rebuilds the target.

This folder owns the game's spec, view and metrics (``game``), its guess type (``guess``), its bounds on
reconstruction success (``bounds``), its audit rule (``rule``) and its report section (``sections``, ``grids`` and
``templates/``)."""

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
