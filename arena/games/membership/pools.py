"""The shared shadow pool of the membership attacks: which records each shadow model trains on, and its training.

The attacker does not know which challenge points are members, so it trains its own shadow models on random
halves of the challenge set, as LiRA does (Carlini et al. 2022): shadows come in complementary pairs, so every
challenge point is IN for exactly half of the shadows and OUT for the other half, and every shadow trains on
``train_size`` records like the target. (The game's challenge is ``2 · train_size`` points, so a shadow's
training set is exactly one half: the same distribution as the target's, whose members are also one half.)

Shokri et al.'s own threat model trains the shadows on the attacker's population data instead (disjoint from
the challenge): ``train_pool(view, k, data="population")`` plans the same complementary halves over the
population records, and ``challenge_in`` then marks population records.

The pool is a deterministic function of (number of challenge points, training-set size, number of shadows,
``pool_seed``) alone. ``pool_seed`` is the game's attack-independent seed, so every attack that asks for a pool
of the same size in the same game asks for the same data and seeds; the training procedure's content-addressed
cache then trains it once per run directory. No input describes membership: the IN/OUT labels of a pool are
the attacker's own random choice, never the target's secret.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from arena.contracts.release import Models
from arena.engine.seeds import derive_seed


@dataclass(frozen=True)
class PoolPlan:
    """What shadow k trains on: ``rows[k]`` (indices into the challenge set, sorted), its seeds, and the
    [K, n_challenge] mask ``challenge_in`` (True where shadow k trained on challenge point j)."""

    rows: np.ndarray
    challenge_in: np.ndarray
    init_seeds: np.ndarray
    train_seeds: np.ndarray


PoolData = Literal["challenge", "population"]
"""The records a pool's shadows train on: halves of the challenge set, or of the attacker's population."""


@dataclass(frozen=True)
class ShadowPool:
    """K trained shadow models and, for each, which of the records the pool was planned on (the challenge
    points, or the population records for a population pool) it trained on."""

    models: Models
    challenge_in: np.ndarray


def plan_pool(n_challenge: int, train_size: int, k: int, pool_seed: int) -> PoolPlan:
    """Complementary pairs of random challenge halves: shadow 2i takes the first ``train_size`` points of the
    i-th random permutation's first half, shadow 2i+1 those of its second half."""
    if k < 2 or k % 2:
        raise ValueError(f"a shadow pool needs an even number of shadows (at least 2), got {k}")
    half = n_challenge // 2
    if train_size > half:
        raise ValueError(f"shadows of {train_size} records need at least {2 * train_size} challenge points, "
                         f"got {n_challenge}")
    rng = np.random.default_rng(derive_seed(pool_seed, "shadow-pool", k))
    perms = rng.permuted(np.tile(np.arange(n_challenge), (k // 2, 1)), axis=1)
    rows = np.empty((k, train_size), dtype=np.int64)
    rows[0::2] = perms[:, :train_size]
    rows[1::2] = perms[:, half : half + train_size]
    rows.sort(axis=1)
    challenge_in = np.zeros((k, n_challenge), dtype=bool)
    np.put_along_axis(challenge_in, rows, True, axis=1)
    init_seeds, train_seeds = rng.integers(0, 2**63 - 1, size=(2, k), dtype=np.int64)
    return PoolPlan(rows, challenge_in, init_seeds, train_seeds)


def train_pool(view, k: int, data: PoolData = "challenge") -> ShadowPool:  # noqa: ANN001 - a membership View
    """Train the k shadows of this game's pool through the target's training procedure, planned as chunks of
    ``view.train.chunk`` models: each chunk is one batched call, its own cache entry and, under Ray, its own task.
    ``data`` names the records the shadows train on (``population`` needs the population capability).

    Under the vulnerable-record protocol the game hands the attack other target models, trained with the defense
    on random complementary halves of this very challenge (``view.shadow_models``): a challenge pool is then the
    first ``k`` of them, trained nowhere else (at most as many as the game hands over).

    A defense that ``needs_reference`` takes its shadows' reference set from the attacker's population: the one the
    game bound to ``view.train`` for challenge pools; for a population pool, each shadow's population records
    outside its own training set (never one of its members)."""
    given = getattr(view, "shadow_models", None) if data == "challenge" else None
    if given is not None:
        if k > given.k or k < 2 or k % 2:
            raise ValueError(f"the vulnerable-record protocol hands over {given.k} shadow models (other targets, "
                             f"in complementary pairs); ask for an even number of at most {given.k}, got {k}")
        return ShadowPool(given.part(0, k), np.asarray(view.shadow_in)[:k])
    records_X, records_y = (view.challenge_X, view.challenge_y) if data == "challenge" else (
        view.population_X, view.population_y)
    plan = plan_pool(len(records_y), view.train_size, k, view.pool_seed)
    rows = torch.from_numpy(plan.rows)
    X, y = records_X[rows], records_y[rows]
    init, train = torch.from_numpy(plan.init_seeds), torch.from_numpy(plan.train_seeds)
    parts: tuple[torch.Tensor, ...] = (X, y, init, train)
    if data == "population" and getattr(view.train.defense, "needs_reference", False):
        outside = np.stack([np.flatnonzero(~taken) for taken in plan.challenge_in])  # [k, P - train_size]
        if outside.shape[1] == 0:
            raise ValueError(f"defense {view.train.defense.name!r} needs a reference set, and shadows of "
                             f"{view.train_size} records leave none of the {len(records_y)} population records out")
        parts += (records_X[torch.from_numpy(outside)], records_y[torch.from_numpy(outside)])
    size = view.train.chunk
    chunks = [tuple(t[s : s + size] for t in parts) for s in range(0, k, size)]
    return ShadowPool(Models.cat(view.train.train_chunks(chunks)), plan.challenge_in)
