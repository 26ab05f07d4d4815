"""Cheating gradient-inversion attacks, written as a hostile plugin author would: each looks for the client's secret
batch in the interpreter (the game object on the heap, or a caller's frame) and returns it exactly when found; when
the route comes back empty it returns the population's mean for every record (no information)."""

from __future__ import annotations

import gc
import sys

import numpy as np

from arena import Attack, GradientsGuess


def _found(game, view, j: int) -> GradientsGuess:
    """Trial j's records (views come in trial order), exactly."""
    rows = game.update_records(j, view.clients)
    return GradientsGuess(records=game.dataset.X[rows].astype(np.float64), labels=game.dataset.y[rows])


def _nothing(view) -> GradientsGuess:
    mean = view.population_X.reshape(len(view.population_X), -1).numpy().mean(0, keepdims=True)
    return GradientsGuess(records=np.repeat(mean, view.n_records, 0))


class GradientsGc(Attack):
    """The game in memory holds every client batch: walk the heap for it."""

    name = "cheat-gradients-gc"
    game = "gradients"
    threat_model = frozenset({"population"})

    trial = 0

    def run(self, view):
        self.trial += 1
        for obj in gc.get_objects():
            if type(obj).__name__ == "GradientsGame":
                return _found(obj, view, self.trial - 1)
        return _nothing(view)


class GradientsFrame(Attack):
    """The game's ``play`` is on the call stack: read its ``self``."""

    name = "cheat-gradients-frame"
    game = "gradients"
    threat_model = frozenset({"population"})

    trial = 0

    def run(self, view):
        self.trial += 1
        frame = sys._getframe()
        while frame is not None:
            for value in frame.f_locals.values():
                if type(value).__name__ == "GradientsGame":
                    return _found(value, view, self.trial - 1)
            frame = frame.f_back
        return _nothing(view)
