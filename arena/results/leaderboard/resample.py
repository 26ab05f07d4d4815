"""Bootstrap draws of a matchup's metrics, by its game: the registered game's ``resample`` (``"module:function"``,
``function(arrays, metrics, *, resamples, seed) -> {metric: draws} | None``) applied to the matchup's saved arrays,
seeded by its key (``arena.engine.seeds.resample_seed``). The leaderboard knows no game's metrics: a metric is
bootstrapped where the game's draws hold it, and gets a t-interval over seeds otherwise (a game that declares no
``resample``, or is no longer registered, gets t-intervals throughout)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from arena.contracts.arrays import ArrayLoader
from arena.engine.seeds import resample_seed
from arena.results.leaderboard.rows import registered_game

Draws = dict[str, np.ndarray]


class Resampler:
    """The bootstrap draws of one track's matchups (each computed once): ``draws(row)`` is ``{metric: draws}``,
    or None where the matchup saved nothing its game can resample."""

    def __init__(self, game: str, arrays: ArrayLoader | None, metrics: Sequence[str], *, resamples: int,
                 seed: int = 0) -> None:
        self.game, self.arrays, self.metrics = game, arrays, list(metrics)
        self.resamples, self.seed = resamples, seed
        self.registered = registered_game(game) is not None
        self.function = _resample_function(game) if self.registered else None
        self._drawn: dict[str, Draws | None] = {}

    def draws(self, row: dict[str, Any]) -> Draws | None:
        key = row["key"]
        if key not in self._drawn:
            saved = self.arrays(key) if self.arrays is not None and self.function is not None else None
            self._drawn[key] = None if saved is None else self.function(
                saved, self.metrics, resamples=self.resamples, seed=resample_seed(key, self.seed))
        return self._drawn[key]

    def of(self, metric: str, rows: Sequence[dict[str, Any]]) -> list[np.ndarray] | None:
        """Each row's draws of ``metric``, or None unless every row has them."""
        draws = [self.draws(r) for r in rows]
        if all(d is not None and metric in d for d in draws):
            return [d[metric] for d in draws]  # type: ignore[index]
        return None

    def why_not(self, metric: str) -> str:
        """Why ``metric`` got t-intervals although there are too few seeds for them."""
        drawn = [d for d in self._drawn.values() if d is not None]
        if not self.registered:
            return f"game {self.game!r} is not registered, so nothing resamples its saved scores"
        if any(metric in d for d in drawn):
            return "some seeds saved no scores to resample"
        if self.function is None or drawn:
            return f"{metric} cannot be recomputed from saved scores"
        return "no saved scores to resample"


def _resample_function(game: str) -> Callable[..., Draws | None] | None:
    """The registered game's ``resample``, imported now; None when it declares none."""
    from arena.results.audit import game_part

    cls = registered_game(game)
    return None if cls is None else game_part(cls, "resample")
