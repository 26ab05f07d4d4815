"""Output perturbation's pieces: the sensitivity formula, that it bounds real neighbours, and the exact solver."""

import math

import pytest
import torch

from arena.engine.newton import design
from arena.engine.output_perturbation import clip_rows, fit_penalised, l2_sensitivity


def test_sensitivity_by_hand():
    # L = sqrt(2) * sqrt(R^2 + 1) = 2 for R = 1; Δ₂ = 2L / (n λ) = 4 / (100 * 0.1) = 0.4, plus 2 tol / λ.
    assert l2_sensitivity(100, 0.1, 1.0, 0.0) == pytest.approx(0.4)
    assert l2_sensitivity(100, 0.1, 1.0, 1e-10) == pytest.approx(0.4 + 2e-9)
    # R = sqrt(3): L = sqrt(2) * 2, Δ₂ = 4 sqrt(2) / (50 * 0.01)
    assert l2_sensitivity(50, 0.01, math.sqrt(3.0), 0.0) == pytest.approx(4 * math.sqrt(2) / 0.5)
    with pytest.raises(ValueError):
        l2_sensitivity(100, 0.0, 1.0, 0.0)


def test_clip_rows_bounds_norms_and_keeps_short_rows():
    X = torch.tensor([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    clipped = clip_rows(X, 1.0)
    torch.testing.assert_close(clipped, torch.tensor([[0.6, 0.8], [0.3, 0.4], [0.0, 0.0]]))


def _objective(X, y, theta, l2):
    logits = X @ theta
    return torch.nn.functional.cross_entropy(logits, y) + 0.5 * l2 * theta.square().sum()


def test_solver_reaches_the_penalised_optimum():
    g = torch.Generator().manual_seed(0)
    K, n, d, C, l2 = 3, 40, 4, 3, 0.05
    X = design(torch.rand(K, n, d, generator=g, dtype=torch.float64))
    y = torch.randint(0, C, (K, n), generator=g)
    theta = fit_penalised(X, y, C, l2, tol=1e-11)
    for k in range(K):
        t = theta[k].clone().requires_grad_(True)
        _objective(X[k], y[k], t, l2).backward()
        assert t.grad.norm() <= 1e-10  # autograd agrees the gradient, intercept row included, vanishes


def test_neighbouring_optima_stay_within_the_bound():
    """Adding any one record (here: the most extreme corners) moves the optimum by less than Δ₂."""
    g = torch.Generator().manual_seed(1)
    n, d, C, l2, R = 30, 3, 3, 0.05, 1.0
    base = clip_rows(torch.rand(n, d, generator=g, dtype=torch.float64), R)
    labels = torch.randint(0, C, (n,), generator=g)
    corners = clip_rows(torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64), R)
    K = len(corners) * C
    X = torch.cat([base.expand(K, -1, -1), corners.repeat_interleave(C, 0)[:, None]], 1)
    y = torch.cat([labels.expand(K, -1), torch.arange(C).repeat(len(corners))[:, None]], 1)
    without = fit_penalised(design(base)[None], labels[None], C, l2)
    with_one = fit_penalised(design(X), y, C, l2)
    moved = (with_one - without).flatten(1).norm(dim=1)
    bound = l2_sensitivity(n + 1, l2, R, 1e-10)  # what the defense uses for the larger set, the tighter one
    assert (moved <= bound).all()
    assert moved.max() > 0.05 * bound  # the bound is not vacuous by orders of magnitude on this data
