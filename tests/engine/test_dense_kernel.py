"""The dense layers' clipping kernel gives the eager ghost norms' factors, the scaled sides and the bias sums to float
rounding, padding rows and zero gradients included, and steps aside for what it cannot read."""

import pytest
import torch

from arena.engine import dense_kernel, dpsgd
from arena.engine.dense import sum_gradients

needs_kernel = pytest.mark.skipif(dense_kernel.library() is None, reason="kernels off or not built")


def _layers(K: int, B: int, widths: list[int], seed: int = 0) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    inputs = [torch.randn(K, B, w, generator=g) for w in widths[:-1]]
    deltas = [torch.randn(K, B, w, generator=g) * 0.3 for w in widths[1:]]
    return inputs, deltas


def _eager(inputs, deltas, clip, valid, scale) -> torch.Tensor:
    factors = dpsgd.clip_factors(dpsgd.per_example_grad_norms(inputs, deltas), clip, scale)
    return factors if valid is None else factors * valid


@needs_kernel
@pytest.mark.parametrize("widths", [[7, 3], [64, 256, 10], [5, 33, 17, 2], [4, 4]])
@pytest.mark.parametrize("clip", [0.05, 1.0, 1e4])
def test_factors_scaled_sides_and_bias_sums_are_the_eager_ones(widths, clip):
    inputs, deltas = _layers(3, 11, widths)
    inputs[0][1, 4] = 0.0  # an example with no gradient at all: its factor is the scale
    for d in deltas:
        d[1, 4] = 0.0
    valid = torch.rand(3, 11, generator=torch.Generator().manual_seed(1)) < 0.7
    for v in (None, valid):
        done = dense_kernel.clipped(inputs, deltas, clip, v, 1 / 11)
        assert done is not None
        factors = _eager(inputs, deltas, clip, v, 1 / 11)
        torch.testing.assert_close(done.factors, factors, rtol=2e-6, atol=0)
        for a, d, scaled, on_input, bias in zip(inputs, deltas, done.scaled, done.scaled_inputs, done.biases):
            assert on_input == (a.shape[-1] < d.shape[-1])  # the narrower side, the delta's on a tie
            torch.testing.assert_close(scaled, (a if on_input else d) * factors.unsqueeze(-1), rtol=2e-6, atol=1e-7)
            torch.testing.assert_close(bias, (d * factors.unsqueeze(-1)).sum(1), rtol=1e-5, atol=1e-6)
        eager = sum_gradients(inputs, deltas, factors)
        for got, want in zip(dpsgd.clipped_sum(inputs, deltas, clip, v, 1 / 11), eager):
            assert got.stride() == want.stride()  # the module's layout, which the noise and the optimizer expect
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert dense_kernel.clipped(inputs, deltas, clip, None, 0.5).factors[1, 4] == 0.5
    assert not dense_kernel.clipped(inputs, deltas, clip, valid, 1.0).factors[~valid].any()


@needs_kernel
def test_views_with_models_second_and_other_layers_norms_give_the_same_as_contiguous_rows():
    """Rows read through their strides (a layer stack's head hands [B, K, width] memory as [K, B, width] views), and
    ``extra`` squared norms added to each example's before its factor."""
    inputs, deltas = _layers(3, 11, [6, 9, 4])
    extra = torch.rand(3, 11, generator=torch.Generator().manual_seed(2)) * 5
    views = [t.transpose(0, 1).contiguous().transpose(0, 1) for t in (*inputs, *deltas)]
    assert not any(v.is_contiguous() for v in views)
    done = dense_kernel.clipped(views[:2], views[2:], 0.5, None, 1 / 11, extra=extra.T.contiguous().T)
    want = dense_kernel.clipped(inputs, deltas, 0.5, None, 1 / 11)
    assert done is not None and want is not None
    norms = (dpsgd.per_example_grad_norms(inputs, deltas).square() + extra).sqrt()
    torch.testing.assert_close(done.factors, dpsgd.clip_factors(norms, 0.5, 1 / 11), rtol=2e-6, atol=0)
    assert (done.factors < want.factors).any()  # the other layers' norms clipped some examples harder
    plain = dense_kernel.clipped(views[:2], views[2:], 0.5, None, 1 / 11)
    assert plain is not None
    for got, ref in zip((*plain.scaled, *plain.biases, plain.factors), (*want.scaled, *want.biases, want.factors)):
        torch.testing.assert_close(got, ref, rtol=0, atol=0)  # the same rows, read in place


@needs_kernel
def test_what_the_kernel_cannot_read_goes_to_the_eager_passes():
    inputs, deltas = _layers(2, 6, [4, 3])
    assert dense_kernel.clipped([i.double() for i in inputs], [d.double() for d in deltas], 1.0, None, 1.0) is None
    strided = torch.randn(2, 6, 8)[..., ::2]
    assert dense_kernel.clipped([strided], deltas, 1.0, None, 1.0) is None
    assert dense_kernel.clipped([inputs[0][:, :5].contiguous()], deltas, 1.0, None, 1.0) is None  # rows differ
    sums = dpsgd.clipped_sum([strided], deltas, 1.0)  # the eager passes give the same sums
    factors = _eager([strided], deltas, 1.0, None, 1.0)
    torch.testing.assert_close(sums[0], torch.einsum("kb,kbi,kbo->kio", factors, strided, deltas[0]))


def test_disabled_the_kernel_is_absent(monkeypatch, tmp_path):
    monkeypatch.setenv("ARENA_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ARENA_KERNELS", "0")
    assert dense_kernel.library.__wrapped__() is None
