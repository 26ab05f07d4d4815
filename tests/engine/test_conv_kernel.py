"""The convolutions' norm kernel gives each example's weight and bias gradients (formed) or their squared norms
(ghost) to float rounding, for every geometry the layer-by-layer path admits, and steps aside for what it cannot
read."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from arena.engine import conv_kernel
from tests.engine import test_conv_ghost

needs_kernel = pytest.mark.skipif(conv_kernel.library() is None, reason="kernels off or not built")

GEOMETRIES = {  # (C, O, H, W, kernel, stride, dilation, padding): the eager ghost norm's, and
    **test_conv_ghost.GEOMETRIES,
    "one-channel": (1, 16, 8, 8, 3, 1, 1, 1),  # the digits CNN's first layer: G's rows read in place
    "wide-map": (2, 3, 9, 20, 3, 1, 1, 1),  # output rows wider than one 16-float vector
    "padding-past-kernel": (2, 2, 3, 3, 2, 1, 1, 2),  # output positions that read no pixel at all
}


def _maps(C: int, O: int, H: int, W: int, conv: nn.Conv2d, B: int, K: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    Ho, Wo = conv(torch.zeros(1, C, H, W)).shape[2:]
    a = torch.randn(B, K * C, H, W, generator=g).contiguous(memory_format=torch.channels_last)
    G = torch.randn(B, K * O, Ho, Wo, generator=g).contiguous(memory_format=torch.channels_last)
    return a, G


def _formed(a: torch.Tensor, G: torch.Tensor, conv: nn.Conv2d, K: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each example's weight gradient [B, K, O, P] and bias gradient [B, K, O], in float64 through torch's unfold."""
    B, KC, H, W = a.shape
    O = G.shape[1] // K
    A = F.unfold(a.double().reshape(B * K, KC // K, H, W), conv.kernel_size, conv.dilation, conv.padding,
                 conv.stride)  # [BK, P, L]
    Gd = G.double().reshape(B * K, O, -1)
    return torch.bmm(Gd, A.mT).view(B, K, O, -1), Gd.sum(-1).view(B, K, O)


@needs_kernel
@pytest.mark.parametrize("name", list(GEOMETRIES))
@pytest.mark.parametrize("materialise", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_the_kernel_gives_each_examples_gradients_and_norms(name, materialise, bias):
    C, O, H, W, k, s, d, p = GEOMETRIES[name]
    conv = nn.Conv2d(C, O, k, stride=s, dilation=d, padding=p, bias=bias)
    B, K = 5, 3
    a, G = _maps(C, O, H, W, conv, B, K)
    a[2, C:2 * C] = 0.0  # one example of the second model with no gradient at all
    weight, bias_grad = _formed(a, G, conv, K)
    done = conv_kernel.norms(conv, a, G, K, materialise)
    assert done is not None
    expected = weight.square().sum((2, 3)) + (bias_grad.square().sum(2) if bias else 0.0)
    torch.testing.assert_close(done.sq.double(), expected, rtol=1e-5, atol=1e-5)
    assert done.sq[2, 1] == pytest.approx(float(bias_grad[2, 1].square().sum()) if bias else 0.0, rel=1e-5)
    assert ("weight" in done.held) == materialise and ("bias" in done.held) == bias
    if materialise:  # in the layout of the layer's weight, as the clipped sum reads it
        torch.testing.assert_close(done.held["weight"].double(), weight, rtol=1e-5, atol=1e-5)
    if bias:
        torch.testing.assert_close(done.held["bias"].double(), bias_grad, rtol=1e-5, atol=1e-5)


@needs_kernel
def test_one_models_norms_do_not_depend_on_the_others_in_its_batch():
    conv = nn.Conv2d(2, 4, 3, padding=1)
    a, G = _maps(2, 4, 6, 6, conv, 4, 3)
    together = conv_kernel.norms(conv, a, G, 3, False)
    alone = conv_kernel.norms(conv, a[:, 2:4].contiguous(memory_format=torch.channels_last),
                              G[:, 4:8].contiguous(memory_format=torch.channels_last), 1, False)
    assert together is not None and alone is not None
    assert torch.equal(together.sq[:, 1], alone.sq[:, 0])


@needs_kernel
def test_what_the_kernel_cannot_read_goes_to_the_eager_passes():
    conv = nn.Conv2d(2, 4, 3, padding=1)
    a, G = _maps(2, 4, 6, 6, conv, 2, 1)
    assert conv_kernel.norms(conv, a.double(), G.double(), 1, False) is None  # float64
    assert conv_kernel.norms(conv, a.contiguous(), G.contiguous(), 1, False) is None  # channels-first
    same = nn.Conv2d(2, 4, 3, padding="same")
    assert conv_kernel.norms(same, a, G, 1, True) is None


def test_disabled_the_kernel_is_absent(monkeypatch, tmp_path):
    monkeypatch.setenv("ARENA_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ARENA_KERNELS", "0")
    assert conv_kernel.library.__wrapped__() is None


@needs_kernel
@pytest.mark.parametrize("materialise", [True, False])
def test_torchs_threads_split_the_examples_without_changing_a_bit(materialise, monkeypatch):
    conv = nn.Conv2d(3, 5, 3, padding=1)
    a, G = _maps(3, 5, 6, 6, conv, 23, 7)  # 161 examples: three threads of at least 32, unequal shares
    monkeypatch.setattr(conv_kernel, "MIN_EXAMPLES_PER_THREAD", 32)
    pools: list[int] = []
    pool = conv_kernel.pool
    monkeypatch.setattr(conv_kernel, "pool", lambda workers: pools.append(workers) or pool(workers))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = conv_kernel.norms(conv, a, G, 7, materialise)
        torch.set_num_threads(3)
        split = conv_kernel.norms(conv, a, G, 7, materialise)
    finally:
        torch.set_num_threads(threads)
    assert alone is not None and split is not None and pools == [3]  # one call alone, one in three threads
    assert torch.equal(alone.sq, split.sq) and alone.held.keys() == split.held.keys()
    assert all(torch.equal(alone.held[k], split.held[k]) for k in alone.held)


@needs_kernel
def test_a_map_too_large_for_the_ghost_kernels_offsets_goes_to_the_eager_passes():
    conv = nn.Conv2d(1, 1, 3, padding=1)  # 216 × 216 pixels: a Gram matrix of 46,656² > 2³¹ entries
    a, G = _maps(1, 1, 216, 216, conv, 1, 1)
    assert conv_kernel.norms(conv, a, G, 1, False) is None
    assert conv_kernel.norms(conv, a, G, 1, True) is not None  # the formed gradient has no such offsets

