"""Augmented queries (mirror, shifts) for LiRA, as Carlini et al. (2022) query targets and shadows."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from arena_plugins.membership import LiRA
from arena_plugins.queries import augmented_queries, shifted


def test_shift_moves_content_and_fills_zeros() -> None:
    img = torch.arange(16.0).reshape(1, 1, 4, 4)
    down = shifted(img, 1, 0)[0, 0]
    assert torch.equal(down[0], torch.zeros(4)) and torch.equal(down[1:], img[0, 0, :3])
    left = shifted(img, 0, -2)[0, 0]
    assert torch.equal(left[:, :2], img[0, 0, :, 2:]) and torch.equal(left[:, 2:], torch.zeros(4, 2))


def test_query_set_identity_first_and_counts() -> None:
    X = torch.rand(3, 2 * 5 * 5)
    views = augmented_queries(X, (2, 5, 5), mirror=True, shift=2)
    assert len(views) == 10 and torch.equal(views[0], X)
    assert torch.equal(views[1].reshape(3, 2, 5, 5), X.reshape(3, 2, 5, 5).flip(-1))
    assert len(augmented_queries(X, (2, 5, 5), mirror=False, shift=1)) == 5
    assert len(augmented_queries(torch.rand(3, 7), (7,), mirror=True, shift=1)) == 1  # a table row has no mirror


class _Pool:
    def __init__(self, models) -> None:
        self.models = models


def _lira_view(symmetric: bool) -> tuple[SimpleNamespace, object]:
    """A view whose target and 8 shadows are random linear models; ``symmetric`` makes every image its own mirror
    and every model blind to left-right order, so mirrored queries repeat the identity query exactly."""
    g = torch.Generator().manual_seed(1)
    n, shape = 30, (1, 4, 4)
    X = torch.rand(n, 16, generator=g)
    W = torch.randn(9, 16, 3, generator=g)
    if symmetric:
        X = (X.reshape(n, 1, 4, 4) + X.reshape(n, 1, 4, 4).flip(-1)).reshape(n, 16) / 2
        W = (W.reshape(9, 1, 4, 4, 3) + W.reshape(9, 1, 4, 4, 3).flip(-2)).reshape(9, 16, 3) / 2

    def logits(k: slice):
        return lambda Q: torch.einsum("nd,kdc->knc", Q, W[k])

    target = SimpleNamespace(log_proba=lambda Q: torch.log_softmax(logits(slice(0, 1))(Q)[0], -1))
    challenge_in = np.zeros((8, n), dtype=bool)
    challenge_in[0::2, : n // 2] = True
    challenge_in[1::2, n // 2 :] = True
    pool = SimpleNamespace(models=SimpleNamespace(logits=logits(slice(1, 9))), challenge_in=challenge_in)
    view = SimpleNamespace(challenge_X=X, challenge_y=torch.randint(0, 3, (n,), generator=g), input_shape=shape,
                           model=target)
    return view, pool


def test_lira_averages_per_query_scores(monkeypatch) -> None:
    for symmetric in (True, False):
        view, pool = _lira_view(symmetric)
        monkeypatch.setattr("arena_plugins.membership.train_pool", lambda v, k, pool=pool: pool)
        plain = LiRA(LiRA.Params(shadows=8)).run(view).scores
        mirrored = LiRA(LiRA.Params(shadows=8, mirror=True)).run(view).scores
        if symmetric:
            np.testing.assert_allclose(mirrored, plain, rtol=1e-10)
        else:
            assert not np.allclose(mirrored, plain)
