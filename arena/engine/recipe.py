"""What a ``train`` call is asked to do: the optimiser schedule (``Recipe``) and DP-SGD's clipping and noise
(``DPNoise``), plain data defined with the contracts (``arena.contracts.recipe``) and named here for the engine."""

from __future__ import annotations

from arena.contracts.recipe import DPNoise as DPNoise
from arena.contracts.recipe import Recipe as Recipe
