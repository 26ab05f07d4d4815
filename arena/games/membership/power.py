"""At which sizes a membership audit could refute a claim: the fewest member/non-member pairs whose paired one-run
bound (Steinke, Nasr & Jagielski 2023), with every pair guessed and every guess right, would exceed the claim's
replace-one ε. Below that size no attack, however strong, can show a violation, so the report says so."""

from __future__ import annotations

import math

from arena.privacy.one_run import guess_grid, one_run_p_value

MAX_PAIRS = 2**16
"""Sizes searched: powers of two up to this many pairs (a claim beyond them is reported as out of reach)."""


def refutable(pairs: int, epsilon: float, alpha: float, delta: float) -> bool:
    """Whether ``pairs`` pairs, all guessed (the guess grid's largest count) and all guesses right, reject
    ``epsilon`` at α over the guess grid (its Bonferroni factor): the one-run p-value of ε at most that, so the
    one-run bound (the least ε whose p-value exceeds it) lies above ε."""
    grid = guess_grid(pairs)
    r = max(k_in + k_out for k_in, k_out in grid)
    return one_run_p_value(pairs, r, r, epsilon, delta) <= alpha / len(grid)


def pairs_to_refute(epsilon: float, delta: float, alpha: float) -> int | None:
    """The smallest power of two of pairs (from 8) that is ``refutable`` for ``epsilon`` (the claim's replace-one
    ε), None if none up to ``MAX_PAIRS`` is (δ's term 2mδ grows with the pairs: past some size none is)."""
    if not math.isfinite(epsilon):
        return None
    pairs = 8
    while pairs <= MAX_PAIRS:
        if refutable(pairs, epsilon, alpha, delta):
            return pairs
        pairs *= 2
    return None
