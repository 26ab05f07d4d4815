"""The ε of several mechanisms run on one dataset, composed by dp_accounting's PLD accountant (add/remove): the
Poisson-subsampled Gaussian runs of DP-SGD and Laplace mechanisms, in any number. A claim check composes every
mechanism a release ran; the largest of their ε would understate a release that ran two of them."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

from arena.privacy.accounting import neighboring_relation

GaussianRun = tuple[float, float, int]
"""(noise multiplier σ, Poisson rate q, steps T) of one DP-SGD run."""


def composed_epsilon(gaussian: Sequence[GaussianRun], laplace: Sequence[float], delta: float) -> float:
    """PLD ε at ``delta`` (add/remove) of all the ``gaussian`` runs and the Laplace mechanisms, each given as
    scale / L1 sensitivity (ε₀ = 1/that alone), composed; ∞ if one of them adds no noise, 0 for none."""
    if not 0 < delta < 1:
        raise ValueError("need 0 < delta < 1")
    if any(s < 0 or not 0 < q <= 1 or t < 0 for s, q, t in gaussian) or any(b < 0 for b in laplace):
        raise ValueError("need noise multipliers >= 0, 0 < q <= 1, steps >= 0 and Laplace scales >= 0")
    live = tuple(sorted((float(s), float(q), int(t)) for s, q, t in gaussian if t > 0))
    if any(s == 0 for s, _, _ in live) or any(b == 0 for b in laplace):
        return math.inf
    return _composed(live, tuple(sorted(float(b) for b in laplace)), delta)


@functools.lru_cache(maxsize=128)  # a PLD composition takes about a second; an audit asks the same one repeatedly
def _composed(gaussian: tuple[GaussianRun, ...], laplace: tuple[float, ...], delta: float) -> float:
    import dp_accounting  # imported here: it takes 1.5 s, and every arena process loads this module
    from dp_accounting import pld

    events: list[dp_accounting.DpEvent] = []
    for sigma, q, steps in gaussian:
        step: dp_accounting.DpEvent = dp_accounting.GaussianDpEvent(sigma)
        if q < 1.0:
            step = dp_accounting.PoissonSampledDpEvent(q, step)
        events.append(dp_accounting.SelfComposedDpEvent(step, steps))
    events += [dp_accounting.LaplaceDpEvent(b) for b in laplace]
    if not events:
        return 0.0
    acc = pld.PLDAccountant(neighboring_relation=neighboring_relation("add_remove"))
    acc.compose(dp_accounting.ComposedDpEvent(events))
    return float(acc.get_epsilon(delta))
