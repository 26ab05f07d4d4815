"""The float32 Box–Muller of exact operations is the textbook formula to float32 accuracy, at the edges of its
fields too (u₁ = 1 and its smallest value, every octant boundary of θ)."""

import math

import numpy as np
import torch

from arena.engine import box_muller

BITS = 24


def _reference(k1: np.ndarray, k2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r = np.sqrt(-2.0 * np.log((k1.astype(np.float64) + 1.0) / 2.0**BITS))
    theta = 2.0 * math.pi * k2.astype(np.float64) / 2.0**BITS
    return r * np.cos(theta), r * np.sin(theta)


def _eager(k1: np.ndarray, k2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    c, s = torch.empty(len(k1)), torch.empty(len(k1))
    box_muller.eager(torch.from_numpy(k1.astype(np.int32)), torch.from_numpy(k2.astype(np.int32)), c, s, BITS)
    return c.double().numpy(), s.double().numpy()


def test_the_edges_of_both_fields_are_the_formula():
    octants = np.arange(9) * 2 ** (BITS - 3)
    k2 = np.concatenate([octants, octants + 1, octants - 1, [2**BITS - 1]]).clip(0, 2**BITS - 1)
    k1 = np.array([0, 1, 2, 2**23 - 1, 2**23, 11_863_283, 2**BITS - 2, 2**BITS - 1])  # 11,863,283: m near √2
    a, b = (x.reshape(-1) for x in np.meshgrid(k1, k2))
    got, want = _eager(a, b), _reference(a, b)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=2e-6 * max(1.0, np.abs(w).max()))
    assert np.all(got[0][a == 2**BITS - 1] == 0) and np.all(got[1][a == 2**BITS - 1] == 0), "u₁ = 1 gives r = 0"
    assert np.abs(got[0]).max() <= math.sqrt(2 * BITS * math.log(2)) + 1e-5, "r at most √(2b ln 2)"


def test_random_fields_are_within_a_few_ulps_of_the_formula():
    g = np.random.default_rng(0)
    k1, k2 = g.integers(0, 2**BITS, 200_000), g.integers(0, 2**BITS, 200_000)
    got, want = _eager(k1, k2), _reference(k1, k2)
    for gv, w in zip(got, want):
        ulp = np.spacing(np.abs(w).astype(np.float32)).astype(np.float64)
        assert np.percentile(np.abs(gv - w) / ulp, 99.9) <= 4.0
        assert np.max(np.abs(gv - w)) < 1e-6


def test_the_float32_root_is_the_float64_root_rounded():
    """C takes r's root in float32, eager in float64 then rounds: the same value for every float32 that is not
    subnormal. Every float in [1/2, 2) is checked, every mantissa at both exponent parities, which covers the rest:
    √(4x) = 2·√x exactly in both formats."""
    x = np.arange(np.float32(0.5).view(np.uint32), np.float32(2.0).view(np.uint32), dtype=np.uint32).view(np.float32)
    assert len(x) == 1 << 24
    assert np.array_equal(np.sqrt(x), np.sqrt(x.astype(np.float64)).astype(np.float32))
