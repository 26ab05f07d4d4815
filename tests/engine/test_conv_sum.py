"""A ghost-normed convolution's clipped weight-gradient sum in C (arena/engine/conv_sum.py): the factor-weighted sum
of each model's examples' weight gradients for every geometry the layer-by-layer path admits, the same alone, in a
batch or on threads, and out of the way where it cannot read the maps or would leave threads idle."""

import pytest
import torch
from torch import nn

from arena.engine import conv_kernel, conv_sum
from tests.engine.test_conv_kernel import GEOMETRIES, _formed, _maps

needs_kernel = pytest.mark.skipif(conv_sum.library() is None, reason="kernels off or not built")


WEIGHT_SUM_GEOMETRIES = {
    **GEOMETRIES,
    "forty-channels": (3, 40, 5, 5, 3, 1, 1, 1),  # a pair of 16-channel halves, then one half part-filled
    "two-halves": (16, 32, 4, 4, 3, 1, 1, 1),  # the digits CNN's second layer
}


@needs_kernel
@pytest.mark.parametrize("name", list(WEIGHT_SUM_GEOMETRIES))
def test_the_weight_sum_is_the_factor_weighted_sum_of_the_examples_gradients(name):
    """Σ_b c[k, b]·(example b's weight gradient), per model, in the layer's weight layout, against float64 formed
    gradients; a factor of 0 (a padding row) drops its example, no factors weigh every example by 1."""
    C, O, H, W, k, s, d, p = WEIGHT_SUM_GEOMETRIES[name]
    conv = nn.Conv2d(C, O, k, stride=s, dilation=d, padding=p)
    B, K = 6, 3
    a, G = _maps(C, O, H, W, conv, B, K)
    weight, _ = _formed(a, G, conv, K)  # [B, K, O, P]
    factors = torch.rand(K, B, generator=torch.Generator().manual_seed(5))
    factors[1, 2] = 0.0
    done = conv_sum.weight_sum(conv, a, G, factors, K)
    assert done is not None and done.shape == (K, *conv.weight.shape)
    expected = torch.einsum("kb,bkop->kop", factors.double(), weight).view(done.shape)
    torch.testing.assert_close(done.double(), expected, rtol=1e-5, atol=1e-4)  # sums of a few hundred products
    ones = conv_sum.weight_sum(conv, a, G, torch.ones(K, B), K)
    assert ones is not None
    assert torch.equal(conv_sum.weight_sum(conv, a, G, None, K), ones)  # no factors: each example weighs 1
    torch.testing.assert_close(ones.double(), weight.sum(0).view(done.shape), rtol=1e-5, atol=1e-4)


@needs_kernel
def test_one_models_weight_sum_is_the_same_alone_and_split_across_threads(monkeypatch):
    conv = nn.Conv2d(3, 20, 3, padding=1)
    a, G = _maps(3, 20, 6, 6, conv, 23, 7)
    factors = torch.rand(7, 23, generator=torch.Generator().manual_seed(6))
    monkeypatch.setattr(conv_kernel, "MIN_EXAMPLES_PER_THREAD", 32)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        together = conv_sum.weight_sum(conv, a, G, factors, 7)
        torch.set_num_threads(3)
        split = conv_sum.weight_sum(conv, a, G, factors, 7)
    finally:
        torch.set_num_threads(threads)
    alone = conv_sum.weight_sum(conv, a[:, 6:9].contiguous(memory_format=torch.channels_last),
                                   G[:, 40:60].contiguous(memory_format=torch.channels_last), factors[2:3], 1)
    assert together is not None and split is not None and alone is not None
    assert torch.equal(together, split) and torch.equal(together[2:3], alone)


@needs_kernel
def test_what_the_weight_sum_cannot_read_goes_to_torchs_weight_backward():
    conv = nn.Conv2d(2, 4, 3, padding=1)
    a, G = _maps(2, 4, 6, 6, conv, 2, 1)
    factors = torch.ones(1, 2)
    assert conv_sum.weight_sum(conv, a.double(), G.double(), factors, 1) is None  # float64
    assert conv_sum.weight_sum(conv, a.contiguous(), G.contiguous(), factors, 1) is None  # channels-first
    assert conv_sum.weight_sum(nn.Conv2d(2, 4, 3, padding="same"), a, G, factors, 1) is None


@needs_kernel
def test_one_model_with_threads_to_spare_leaves_its_weight_sum_to_onednn():
    conv = nn.Conv2d(2, 4, 3, padding=1)
    a, G = _maps(2, 4, 6, 6, conv, 2 * conv_kernel.MIN_EXAMPLES_PER_THREAD, 1)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert conv_sum.weight_sum(conv, a, G, torch.ones(1, a.shape[0]), 1) is None  # it would run on one
        torch.set_num_threads(1)
        assert conv_sum.weight_sum(conv, a, G, torch.ones(1, a.shape[0]), 1) is not None
    finally:
        torch.set_num_threads(threads)
