"""The dense layers' clip-factor kernel gives the eager ghost norms' factors to float rounding, padding rows and zero
gradients included, and steps aside for what it cannot read."""

import pytest
import torch

from arena.engine import dense_kernel, dpsgd

needs_kernel = pytest.mark.skipif(dense_kernel.library() is None, reason="no C compiler or cache folder here")


def _layers(K: int, B: int, widths: list[int], seed: int = 0) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    inputs = [torch.randn(K, B, w, generator=g) for w in widths[:-1]]
    deltas = [torch.randn(K, B, w, generator=g) * 0.3 for w in widths[1:]]
    return inputs, deltas


def _eager(inputs, deltas, clip, valid, scale) -> torch.Tensor:
    factors = dpsgd.clip_factors(dpsgd.per_example_grad_norms(inputs, deltas), clip, scale)
    return factors if valid is None else factors * valid


@needs_kernel
@pytest.mark.parametrize("widths", [[7, 3], [64, 256, 10], [5, 33, 17, 2]])
@pytest.mark.parametrize("clip", [0.05, 1.0, 1e4])
def test_factors_are_the_eager_factors(widths, clip):
    inputs, deltas = _layers(3, 11, widths)
    inputs[0][1, 4] = 0.0  # an example with no gradient at all: its factor is the scale
    for d in deltas:
        d[1, 4] = 0.0
    valid = torch.rand(3, 11, generator=torch.Generator().manual_seed(1)) < 0.7
    for v in (None, valid):
        got = dense_kernel.clip_factors(inputs, deltas, clip, v, 1 / 11)
        assert got is not None and got.shape == (3, 11)
        torch.testing.assert_close(got, _eager(inputs, deltas, clip, v, 1 / 11), rtol=2e-6, atol=0)
    assert dense_kernel.clip_factors(inputs, deltas, clip, None, 0.5)[1, 4] == 0.5
    assert not dense_kernel.clip_factors(inputs, deltas, clip, valid, 1.0)[~valid].any()


@needs_kernel
def test_what_the_kernel_cannot_read_goes_to_the_eager_passes():
    inputs, deltas = _layers(2, 6, [4, 3])
    assert dense_kernel.clip_factors([i.double() for i in inputs], [d.double() for d in deltas], 1.0, None, 1.0) is None
    strided = torch.randn(2, 6, 8)[..., ::2]
    assert dense_kernel.clip_factors([strided], deltas, 1.0, None, 1.0) is None
    assert dense_kernel.clip_factors([inputs[0][:, :5]], [deltas[0][:, 1:]], 1.0, None, 1.0) is None  # rows differ
    sums = dpsgd.clipped_sum([strided], deltas, 1.0)  # the eager passes give the same sums
    factors = _eager([strided], deltas, 1.0, None, 1.0)
    torch.testing.assert_close(sums[0], torch.einsum("kb,kbi,kbo->kio", factors, strided, deltas[0]))


def test_disabled_the_kernel_is_absent(monkeypatch, tmp_path):
    monkeypatch.setenv("ARENA_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ARENA_KERNELS", "0")
    assert dense_kernel.library.__wrapped__() is None
