"""The reconstruction game (Balle, Cherubin & Hayes 2022): an informed adversary who knows D⁻ rebuilds the target.

This folder owns the game's spec, view and metrics (``game``), its audit rule (``audit``), its report section
(``report``, ``grids`` and ``templates/``)."""

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

__all__ = ["METRICS", "ReconstructionGame", "ReconstructionGameSpec", "ReconstructionView", "distinct_rows",
           "kappa_estimate", "nearest_neighbours", "pairwise_mse", "prior_mass", "reconstruction_metrics", "row_mse"]
