"""The one-channel convolution kernel gives torch's output to float rounding for every geometry the layer-by-layer
path admits, in channels-last memory, and steps aside for what it does not take; a grey-image CNN trains alone
through it (DP-SGD) as in a batch without it."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from arena.engine import conv_forward, conv_kernel, conv_sum
from arena.engine.recipe import DPNoise, Recipe
from arena.engine.trainer import train
from tests.conftest import architecture

needs_kernel = pytest.mark.skipif(conv_forward.library() is None, reason="kernels off or not built")

GEOMETRIES = {  # (O, H, W, kernel, stride, dilation, padding)
    "digits-first-layer": (16, 8, 8, 3, 1, 1, 1),
    "channels-past-one-vector": (20, 7, 9, 3, 1, 1, 1),  # 16 + 4 lanes: a masked store
    "few-channels": (5, 6, 6, 3, 1, 1, 0),
    "strided-wide-kernel": (16, 11, 13, 5, 2, 1, 2),
    "dilated": (8, 10, 10, 3, 1, 2, 2),
    "asymmetric": (16, 9, 12, (3, 2), (2, 1), 1, (1, 0)),
    "rows-past-one-span": (3, 4, 21, 3, 1, 1, 1),  # 21 output columns: two spans of 8 and a short one
}


def _size(conv: nn.Conv2d, a: torch.Tensor) -> tuple[int, int]:
    """The layer's output height and width on maps like a's."""
    return tuple(conv(torch.zeros(1, conv.in_channels, *a.shape[2:])).shape[2:])


def _layer(name: str, bias: bool) -> tuple[nn.Conv2d, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    O, H, W, k, s, d, p = GEOMETRIES[name]
    conv = nn.Conv2d(1, O, k, stride=s, dilation=d, padding=p, bias=bias)
    g = torch.Generator().manual_seed(5)
    a = torch.randn(6, 1, H, W, generator=g)
    w = torch.randn(1, *conv.weight.shape, generator=g)
    b = torch.randn(1, O, generator=g) if bias else None
    return conv, a, w, b


@needs_kernel
@pytest.mark.parametrize("name", list(GEOMETRIES))
@pytest.mark.parametrize("bias", [True, False])
def test_the_kernel_gives_torchs_output_in_channels_last_memory(name, bias):
    conv, a, w, b = _layer(name, bias)
    out = conv_forward.conv2d(conv, a, w, b, 1, _size(conv, a))
    assert out is not None and out.is_contiguous(memory_format=torch.channels_last)
    ref = F.conv2d(a, w[0], None if b is None else b[0], conv.stride, conv.padding, conv.dilation)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


@needs_kernel
def test_each_example_is_its_own_and_threads_change_no_bit():
    conv, a, w, b = _layer("digits-first-layer", True)
    a = torch.randn(200, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    whole = conv_forward.conv2d(conv, a, w, b, 1, _size(conv, a))
    part = conv_forward.conv2d(conv, a[7:9], w, b, 1, _size(conv, a))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(3)  # 200 examples: three threads of at least 64
        split = conv_forward.conv2d(conv, a, w, b, 1, _size(conv, a))
    finally:
        torch.set_num_threads(threads)
    assert whole is not None and part is not None and split is not None
    assert torch.equal(whole[7:9], part) and torch.equal(whole, split)


@needs_kernel
def test_it_steps_aside_for_what_torch_runs_faster_or_it_cannot_read(monkeypatch):
    conv, a, w, b = _layer("digits-first-layer", True)
    assert conv_forward.conv2d(conv, a.repeat(1, 2, 1, 1), w.repeat(2, 1, 1, 1, 1), b.repeat(2, 1), 2,
                               _size(conv, a)) is None
    three = nn.Conv2d(3, 4, 3)
    assert conv_forward.conv2d(three, torch.randn(2, 3, 5, 5), torch.randn(1, 4, 3, 3, 3), None, 1, (3, 3)) is None
    assert conv_forward.conv2d(conv, a.double(), w.double(), b.double(), 1, _size(conv, a)) is None
    with torch.enable_grad():  # autograd would differentiate through it: torch's convolution
        assert conv_forward.conv2d(conv, a, w.clone().requires_grad_(), b, 1, _size(conv, a)) is None
    with torch.no_grad():
        assert conv_forward.conv2d(conv, a, w.clone().requires_grad_(), b, 1, _size(conv, a)) is not None
    monkeypatch.setattr(conv_forward, "library", lambda: None)
    assert conv_forward.conv2d(conv, a, w, b, 1, _size(conv, a)) is None


@pytest.mark.skipif(conv_forward.library() is None or conv_kernel.library() is None or conv_sum.library() is None,
                    reason="kernels off or not built")
@pytest.mark.parametrize("dp", [None, DPNoise(1.0, 1.1)], ids=["non-private", "dp-sgd"])
def test_a_grey_cnn_trains_alone_through_the_kernel_as_in_a_batch_and_without_it(dp, monkeypatch):
    cnn = architecture("cnn", (1, 8, 8), 3, channels=[4, 8], hidden=8)
    g = torch.Generator().manual_seed(4)
    X, y = torch.rand(3, 40, 64, generator=g), torch.randint(0, 3, (3, 40), generator=g)
    recipe, init, tr = Recipe(epochs=2, lr=0.1, momentum=0.9, batch_size=8), torch.tensor([1, 2, 3]), torch.tensor(
        [4, 5, 6])
    used: list[bool] = []  # whether the kernel ran, at each call for the first (grey) layer
    conv2d = conv_forward.conv2d

    def spy(m, a, w, b, K, size):
        out = conv2d(m, a, w, b, K, size)
        if w.shape[2] == 1:
            used.append(out is not None)
        return out

    monkeypatch.setattr(conv_forward, "conv2d", spy)
    sums: list[bool] = []  # whether the first layer's weight sum came from the C kernel, at each call
    weight_sum = conv_sum.weight_sum

    def summed(m, a, G, c, K):
        out = weight_sum(m, a, G, c, K)
        sums.append(m.in_channels == 1 and out is not None)
        return out

    monkeypatch.setattr(conv_sum, "weight_sum", summed)
    batched = train(cnn, X, y, recipe, init, tr, dp)
    assert used and not any(used)  # three models: torch's grouped convolution
    for k in (0, 2):
        used.clear()
        alone = train(cnn, X[k : k + 1], y[k : k + 1], recipe, init[k : k + 1], tr[k : k + 1], dp)
        assert used and all(used)  # both ways take the layer's gradient at its output
        assert any(sums) == (dp is None)  # non-private: its weight sum by the kernel (DP-SGD forms each example's)
        for name, pa in alone.items():
            torch.testing.assert_close(batched[name][k : k + 1], pa, rtol=1e-4, atol=1e-5)
    monkeypatch.setattr(conv_forward, "library", lambda: None)
    without = train(cnn, X[:1], y[:1], recipe, init[:1], tr[:1], dp)
    for name, pw in without.items():
        torch.testing.assert_close(batched[name][:1], pw, rtol=1e-4, atol=1e-5)
