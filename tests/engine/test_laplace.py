"""Laplace mechanism: the draws follow Lap(b) (the tutorial's numbers for b = 0.1) and b = Δ₁/ε."""

import math

import pytest
import torch

from arena.engine import rng
from arena.engine.laplace import l1_from_l2, laplace, laplace_scale

STREAM = rng.stream(rng.Purpose.NOISE)


def test_tutorial_statistics_for_scale_point_one():
    """Lap(0.1): half the draws within ±0.069 (median |x| = b ln 2), 95% within ±0.3 (b ln 20)."""
    x = laplace(torch.arange(20), STREAM, 10_000, scale=0.1).flatten()
    assert x.shape == (200_000,)
    assert abs((x.abs() <= 0.069).double().mean().item() - 0.5) < 0.005
    assert abs((x.abs() <= 0.3).double().mean().item() - 0.95) < 0.003
    assert abs(x.mean().item()) < 0.002  # symmetric: E x = 0, sd of the mean is 0.1·sqrt(2/2e5) = 3e-4
    assert abs(x.abs().mean().item() - 0.1) < 0.002  # E|x| = b
    assert torch.isfinite(x).all()


def test_draws_depend_only_on_each_models_seed():
    alone = laplace(torch.tensor([7]), STREAM, (3, 4), scale=2.0)
    batched = laplace(torch.tensor([1, 7, 9]), STREAM, (3, 4), scale=2.0)
    assert alone.shape == (1, 3, 4)
    torch.testing.assert_close(batched[1:2], alone)
    assert not torch.equal(batched[0], batched[1])
    torch.testing.assert_close(laplace(torch.tensor([7]), STREAM, (3, 4), scale=4.0), 2.0 * alone)


def test_scale_is_sensitivity_over_epsilon():
    assert laplace_scale(0.5, 2.0) == 0.25
    assert l1_from_l2(0.4, 650) == pytest.approx(0.4 * math.sqrt(650))
    for bad in [(0.0, 1.0), (1.0, 0.0), (math.inf, 1.0), (-1.0, 1.0)]:
        with pytest.raises(ValueError):
            laplace_scale(*bad)
