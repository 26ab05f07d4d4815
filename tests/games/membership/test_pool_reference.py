"""A population pool of a defense that needs a reference set gives each shadow the population records outside its
own training set (never one of its members); a challenge pool passes none (the bound population serves)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from arena.contracts.release import Models
from arena.games.membership.pools import train_pool


class _Recording:
    chunk = 2

    def __init__(self, needs: bool) -> None:
        self.defense = SimpleNamespace(name="spy", needs_reference=needs)
        self.chunks: list[tuple] = []

    def train_chunks(self, chunks):
        self.chunks.extend(chunks)
        return [SimpleNamespace() for _ in chunks]


def test_population_pool_shadows_get_the_population_outside_their_training_set(monkeypatch) -> None:
    monkeypatch.setattr(Models, "cat", staticmethod(lambda parts: parts))
    P, n = 10, 4
    pop_X = torch.arange(P, dtype=torch.float32).reshape(P, 1).repeat(1, 3)
    view = SimpleNamespace(population_X=pop_X, population_y=torch.arange(P), challenge_X=pop_X[:8],
                           challenge_y=torch.arange(8), train_size=n, pool_seed=5, train=_Recording(True))
    pool = train_pool(view, 4, data="population")
    assert all(len(c) == 6 for c in view.train.chunks)
    X = torch.cat([c[0] for c in view.train.chunks])
    ref_y = torch.cat([c[5] for c in view.train.chunks])
    for k in range(4):
        trained = set(X[k, :, 0].long().tolist())
        assert trained == set(torch.nonzero(torch.from_numpy(pool.challenge_in[k])).squeeze(-1).tolist())
        assert set(ref_y[k].tolist()) == set(range(P)) - trained
    view.train = _Recording(True)
    train_pool(view, 4, data="challenge")
    assert all(len(c) == 4 for c in view.train.chunks)
    view.train = _Recording(False)
    train_pool(view, 4, data="population")
    assert all(len(c) == 4 for c in view.train.chunks)
