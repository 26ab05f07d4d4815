"""A convolution's ghost norm (arena/engine/conv_ghost.py): the squared norm of each example's weight gradient,
by the offsets' strided sums and by the pair map alike."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from arena.engine import conv_ghost, ghost_plan

GEOMETRIES = {  # (C, O, H, W, kernel, stride, dilation, padding)
    "same": (3, 5, 4, 4, 3, 1, 1, 1),
    "strided": (3, 4, 5, 3, 3, 2, 1, 1),
    "dilated": (2, 4, 4, 4, 3, 1, 2, 2),
    "no-padding": (4, 3, 6, 2, 2, 2, 1, 0),
    "rectangular": (2, 3, 5, 3, (3, 2), (1, 2), (1, 1), (0, 1)),
    "large": (2, 3, 7, 6, 3, 1, 1, 1),  # 42 × 42 positions: past the pair map's limit
}


@pytest.mark.parametrize("name", list(GEOMETRIES))
def test_the_ghost_norm_is_each_examples_weight_gradient_norm(name):
    C, O, H, W, k, s, d, p = GEOMETRIES[name]
    conv = nn.Conv2d(C, O, k, stride=s, dilation=d, padding=p)
    in_shape, out_shape = (C, H, W), tuple(conv(torch.zeros(1, C, H, W)).shape[1:])
    offsets = conv_ghost.conv_offsets(conv, in_shape, out_shape)
    pairs = conv_ghost.pair_map(offsets, in_shape, out_shape)
    assert (pairs is None) == (name == "large")
    B, K = 4, 3
    g = torch.Generator().manual_seed(1)
    a = torch.randn(B, K * C, H, W, dtype=torch.float64, generator=g).contiguous(memory_format=torch.channels_last)
    G = torch.randn(B, K * O, *out_shape[1:], dtype=torch.float64, generator=g)
    A = F.unfold(a.reshape(B * K, C, H, W), conv.kernel_size, conv.dilation, conv.padding, conv.stride)
    expected = torch.bmm(G.reshape(B * K, O, -1), A.mT).square().sum((1, 2)).view(B, K)  # G·Aᵀ formed
    Gl = conv_ghost.positions_first(G, K)
    for way in (None, pairs):
        got = conv_ghost.conv_ghost_norm(in_shape, out_shape, offsets, way, a, Gl, B, K)
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=0)


def test_a_plan_keeps_pair_maps_for_small_ghost_normed_maps_only():
    module = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.Conv2d(2, 40, 3, padding=1), nn.Flatten(),
                           nn.Linear(40 * 16, 3))
    plan = ghost_plan.plan(module, (1, 4, 4))
    assert plan is not None
    first, second = (layer for layer in plan.layers if layer.kind == "conv")
    assert first.materialise and first.pairs is None  # formed per-example gradients need no map
    assert not second.materialise and second.pairs is not None and second.pairs.shape == (256, 256)


@pytest.mark.parametrize("name", list(GEOMETRIES))
def test_unfold_is_torchs_unfold(name):
    C, O, H, W, k, s, d, p = GEOMETRIES[name]
    conv = nn.Conv2d(C, O, k, stride=s, dilation=d, padding=p)
    a = torch.randn(3, C, H, W, generator=torch.Generator().manual_seed(2))
    for x in (a, a.contiguous(memory_format=torch.channels_last)):
        expected = F.unfold(x, conv.kernel_size, conv.dilation, conv.padding, conv.stride)
        assert torch.equal(conv_ghost.unfold(x, conv), expected)
