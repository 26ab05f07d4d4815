"""Bootstrap draws of a matchup's metrics, by its game: drawn once, when the matchup is scored
(``arena.pipeline.execute.bootstrap_draws``: the registered game's ``resample`` on its arrays, ``RESAMPLES`` draws
seeded by its key, ``arena.engine.seeds.resample_seed``), saved beside its row (``RunStore.save_draws``) and read
back here. A matchup that saved none (a run from before draws were saved, or a board asking for another number of
resamples or another seed) is resampled here from its saved arrays, by the same function with the same seed, so
both paths give the same draws.

The leaderboard knows no game's metrics: a metric is bootstrapped where the game's draws hold it; a cell whose
draws do not hold it gets no bootstrap interval (a game that declares no ``resample``, or is no longer registered,
has none to give)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import Any

import numpy as np

from arena.contracts.arrays import ArrayLoader
from arena.engine.seeds import RESAMPLES, resample_seed
from arena.results.games import recorded_game
from arena.results.leaderboard.intervals import CONFIDENCE, CellDraws, cell_draws_of
from arena.results.leaderboard.rows import registered_game

Draws = dict[str, np.ndarray]
DrawLoader = Callable[[str], Mapping[str, np.ndarray] | None]
"""``draws(key)``: the bootstrap draws a matchup saved when it was scored (metric → draws), None where it saved
none."""


def saved_draws(store: Any) -> DrawLoader:
    """The loader of a run directory's saved bootstrap draws (``RunStore.load_draws``)."""
    return store.load_draws


class Resampler:
    """The bootstrap draws of one track's matchups, read (or computed) once each and summarised per cell at once
    (``of``: ``CellDraws``, the percentile ends at each of ``confidences``), so that a board holds a few numbers
    per cell, never every matchup's draws. Saved draws (``saved``) are read where the board asks for the draws that
    were saved (``RESAMPLES`` of them, board seed 0); otherwise, or where a matchup saved none, the game's
    ``resample`` recomputes them from the matchup's arrays (``arrays``): a built-in game's as its rows record it
    (``rows``, ``arena.results.games``), another's from the registry, which loads the plugins only then."""

    def __init__(self, game: str, arrays: ArrayLoader | None, metrics: Sequence[str], *, resamples: int = RESAMPLES,
                 seed: int = 0, saved: DrawLoader | None = None, rows: Sequence[Mapping[str, Any]] = (),
                 confidences: Sequence[float] = (CONFIDENCE,)) -> None:
        self.game, self.arrays, self.metrics, self.rows = game, arrays, list(metrics), rows
        self.resamples, self.seed, self.confidences = resamples, seed, tuple(confidences)
        self.saved = saved if (resamples, seed) == (RESAMPLES, 0) else None
        self.read = 0  # matchups whose saved draws were read
        self.recomputed = 0  # matchups resampled here from their arrays
        self.drawn = 0  # matchups with draws (read or recomputed)
        self.held: set[str] = set()  # the metrics some matchup's draws hold
        self._cells: dict[tuple[str, ...], dict[str, CellDraws]] = {}

    @cached_property
    def game_class(self) -> Any:
        """The game as its rows record it (``arena.results.games``), else the registered class (None: neither)."""
        recorded = recorded_game(self.game, self.rows)
        return recorded if recorded is not None else registered_game(self.game)

    @cached_property
    def registered(self) -> bool:
        return self.game_class is not None

    @cached_property
    def function(self) -> Callable[..., Draws | None] | None:
        """The game's ``resample``, imported now; None when it declares none."""
        from arena.results.audit import game_part

        return game_part(self.game_class, "resample") if self.registered else None

    def _saved(self, key: str) -> Draws | None:
        found = self.saved(key) if self.saved is not None else None
        if not found or any(np.shape(v) != (self.resamples,) for v in found.values()):
            return None
        return {k: np.asarray(v, dtype=np.float64) for k, v in found.items()}

    def draws(self, row: dict[str, Any]) -> Draws | None:
        """One matchup's draws (metric → draws), read or computed now (not kept: ``of`` summarises them)."""
        key = row["key"]
        drawn = self._saved(key)
        if drawn is not None:
            self.read += 1
        elif self.arrays is not None and self.function is not None:
            arrays = self.arrays(key)
            drawn = None if arrays is None else self.function(
                arrays, self.metrics, resamples=self.resamples, seed=resample_seed(key, self.seed))
            self.recomputed += drawn is not None
        if drawn is not None:
            self.drawn += 1
            self.held.update(drawn)
        return drawn

    def of(self, metric: str, rows: Sequence[dict[str, Any]]) -> CellDraws | None:
        """The cell of ``rows``' draws of ``metric`` summarised (``CellDraws``), or None unless every row has them.
        Each cell's draws are read once, for every metric, the first time any of its metrics is asked for."""
        cell = tuple(r["key"] for r in rows)
        if cell not in self._cells:
            draws = [self.draws(r) for r in rows]
            common = set.intersection(*(set(d) if d is not None else set() for d in draws)) if draws else set()
            shaped = [m for m in sorted(common) if len({np.shape(d[m]) for d in draws if d is not None}) == 1]
            self._cells[cell] = cell_draws_of([d for d in draws if d is not None], shaped, self.confidences)
        return self._cells[cell].get(metric)

    @property
    def source(self) -> str:
        """Where the draws came from, for the board's header."""
        if self.read and not self.recomputed:
            return "drawn when each matchup was scored"
        if self.recomputed and not self.read:
            return "resampled from the saved scores"
        return "drawn when scored, or resampled from the saved scores where a matchup saved no draws"

    def why_not(self, metric: str) -> str:
        """Why ``metric`` has no bootstrap interval in some cell."""
        if metric in self.held:
            return "some seeds saved no scores to resample"
        if self.drawn:
            return f"{metric} cannot be recomputed from saved scores"
        if self.arrays is None and self.saved is None:
            return "no saved scores were given to resample"
        if not self.registered:
            return f"game {self.game!r} is not registered, so nothing resamples its saved scores"
        if self.function is None:
            return f"game {self.game!r} declares no resampling of its metrics"
        return "no saved scores to resample"
