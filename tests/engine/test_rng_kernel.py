"""The counter RNG's compiled kernel draws exactly the bits of the eager tensor passes (so a model trains the same
on a machine with or without a C compiler), and the generator falls back to eager passes when it is unavailable."""

import pytest
import torch

from arena.engine import rng, rng_kernel

SEEDS = torch.tensor([0, 1, 2**40 + 7, -5, 2**63 - 1, -(2**63)], dtype=torch.int64)
STREAMS = [rng.stream(rng.Purpose.NOISE, t) for t in (0, 3, 2**20)]

needs_kernel = pytest.mark.skipif(rng_kernel.library() is None, reason="kernels off or not built")


def _eager(monkeypatch, draw):
    with monkeypatch.context() as m:
        m.setattr(rng_kernel, "usable", lambda *tensors: None)
        return draw()


@needs_kernel
@pytest.mark.parametrize("n", [1, 2, 9, 1501])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kernel_normals_uniforms_and_words_are_the_eager_bits(monkeypatch, n, dtype):
    draws = {
        "normal": lambda: rng.normal(SEEDS, STREAMS, n, dtype),
        "normal, one stream, a workspace": lambda: rng.normal(rng.Keys(SEEDS), STREAMS[1], (n, 3), dtype,
                                                              rng.Workspace()),
        "uniform": lambda: rng.uniform(SEEDS, STREAMS[2], n, dtype),
        "bits": lambda: rng.bits(SEEDS, STREAMS[0], n),
        "permutation": lambda: rng.permutation(SEEDS, STREAMS[0], n),
    }
    for name, draw in draws.items():
        assert torch.equal(draw(), _eager(monkeypatch, draw)), name


@needs_kernel
def test_kernel_normals_in_column_blocks_are_the_eager_bits(monkeypatch):
    """A draw wider than one block (``rng._BLOCK`` pairs over all rows) goes through several kernel calls."""
    draw = lambda: rng.normal(SEEDS, STREAMS, 4 * (rng._BLOCK // (len(SEEDS) * len(STREAMS))) + 3)  # noqa: E731
    assert torch.equal(draw(), _eager(monkeypatch, draw))


@needs_kernel
@pytest.mark.parametrize("p", [0.0, 1e-3, 0.32, 0.5, 1.0])
def test_kernel_coins_are_the_eager_coins(monkeypatch, p):
    draw = lambda: rng.bernoulli(SEEDS, STREAMS, (7, 300), p)  # noqa: E731
    coins = draw()
    assert coins.dtype == torch.bool and coins.shape == (3, len(SEEDS), 7, 300)
    assert torch.equal(coins, _eager(monkeypatch, draw))


@needs_kernel
@pytest.mark.parametrize("with_present", [False, True])
def test_kernel_sampled_rows_are_the_rows_of_the_eager_coins(monkeypatch, with_present):
    present = torch.rand(len(SEEDS), 300, generator=torch.Generator().manual_seed(0)) < 0.7 if with_present else None
    idx, counts = rng.sampled_rows(SEEDS, STREAMS, 300, 0.32, present)
    assert idx.shape == (3, len(SEEDS), 300) and counts.shape == (3, len(SEEDS))
    eager = _eager(monkeypatch, lambda: rng.sampled_rows(SEEDS, STREAMS, 300, 0.32, present))
    assert torch.equal(counts, eager[1])
    for s, most in enumerate(counts.amax(1).tolist()):  # the columns stream s defines
        assert torch.equal(idx[s, :, :most], eager[0][s, :, :most])
    coins = rng.bernoulli(SEEDS, STREAMS, 300, 0.32) & (True if present is None else present)
    assert torch.equal(counts, coins.sum(-1))
    for s, k in [(0, 0), (2, 3)]:
        rows = coins[s, k].nonzero().squeeze(1)
        most = int(counts[s].max())
        assert torch.equal(idx[s, k, : len(rows)], rows) and not idx[s, k, len(rows) : most].any()


def _adder_case(n: int, K: int):
    """A weight held transposed ([K, in, out] memory of [K, out, in], as the dense path's gradients), a bias, a gap
    of elements no tensor takes, and rows further apart than their size."""
    w = torch.randn(K, 4, 3).transpose(1, 2)  # [K, 3, 4] view, each row one block in [4, 3] order
    b = torch.randn(K, 7)[:, :5]  # row stride 7 > 5
    layout = [(tuple(w.shape), w.stride(), 0), (tuple(b.shape), b.stride(), 12 + 2)]
    assert n >= 12 + 2 + 5
    return [w, b], layout


@needs_kernel
@pytest.mark.parametrize("n", [19, 20, 1501])
def test_the_adder_adds_exactly_the_normals_of_the_draw(n):
    K, alpha = 3, -0.37
    keys = rng.Keys(SEEDS[:K])
    (w, b), layout = _adder_case(n, K)
    before = [w.clone(), b.clone()]
    assert rng.NormalAdder(layout, n)(keys, STREAMS[1], alpha, [w, b])
    z = rng.normal(keys, STREAMS[1], n)
    expect_w = before[0] + alpha * z[:, :12].reshape(K, 4, 3).transpose(1, 2)  # one rounding per product and sum
    expect_b = before[1] + alpha * z[:, 14:19]
    assert torch.equal(w, expect_w) and torch.equal(b, expect_b)


@needs_kernel
def test_the_adder_refuses_layouts_it_would_write_outside_of():
    (w, b), layout = _adder_case(40, 2)
    with pytest.raises(ValueError, match="overlap"):
        rng.NormalAdder([layout[0], (layout[1][0], layout[1][1], 11)], 40)  # the bias would take element 11 too
    with pytest.raises(ValueError, match="within"):
        rng.NormalAdder(layout, 18)
    gappy = torch.randn(2, 3, 8)[:, :, :4]
    with pytest.raises(ValueError, match="dense"):
        rng.NormalAdder([(tuple(gappy.shape), gappy.stride(), 0)], 40)
    assert not rng.NormalAdder(layout, 40)(rng.Keys(SEEDS[:3]), STREAMS[0], 1.0, [w, b])  # 3 models, rows for 2


def test_without_the_kernel_the_adder_adds_nothing_and_says_so(monkeypatch):
    (w, b), layout = _adder_case(40, 2)
    before = [w.clone(), b.clone()]
    monkeypatch.setattr(rng_kernel, "usable", lambda *tensors: None)
    assert not rng.NormalAdder(layout, 40)(rng.Keys(SEEDS[:2]), STREAMS[0], 1.0, [w, b])
    assert torch.equal(w, before[0]) and torch.equal(b, before[1])


@needs_kernel
def test_stream_keys_are_the_eager_keys(monkeypatch):
    keys = rng.Keys(SEEDS)
    for stream in (STREAMS[0], STREAMS):
        assert torch.equal(keys.stream_keys(stream), _eager(monkeypatch, lambda s=stream: keys.stream_keys(s)))


@needs_kernel
def test_the_adders_heavy_ball_step_is_the_eager_step_after_the_noise():
    """Noise, weight decay, momentum and the update in the kernel's one pass: HeavyBall.step's arithmetic, in its
    order, each operation rounded once (so to an ulp of torch's, which may fuse a multiply-add)."""
    K, n, alpha, decay, momentum, lr = 3, 40, 0.3, 0.01, 0.9, 0.1
    keys = rng.Keys(SEEDS[:K])
    (w_grad, b_grad), layout = _adder_case(n, K)
    params = [torch.randn(K, 4, 3).transpose(1, 2), torch.randn(K, 7)[:, :5]]
    velocity = [torch.randn(K, 4, 3).transpose(1, 2), torch.randn(K, 7)[:, :5]]
    grads, start = [w_grad, b_grad], [g.clone() for g in (w_grad, b_grad)]
    expect_params, expect_velocity = [p.clone() for p in params], []
    z = rng.normal(keys, STREAMS[0], n)
    noise = [z[:, :12].reshape(K, 4, 3).transpose(1, 2), z[:, 14:19]]
    for g, v, p, e, l2 in zip(start, velocity, expect_params, noise, [decay, 0.0]):
        x = g + alpha * e
        x = x + l2 * p
        x = x + momentum * v
        expect_velocity.append(x)
        p += -lr * x
    plan = rng.HeavyBallPlan(params, [decay, 0.0], momentum, lr)
    assert rng.NormalAdder(layout, n)(keys, STREAMS[0], alpha, grads, (plan, velocity))
    for got, want in [*zip(grads, expect_velocity), *zip(params, expect_params)]:
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


@needs_kernel
def test_the_adder_takes_no_step_with_a_velocity_laid_out_otherwise():
    K, n = 2, 40
    (w_grad, b_grad), layout = _adder_case(n, K)
    params = [torch.randn(K, 4, 3).transpose(1, 2), torch.randn(K, 7)[:, :5]]
    before = [w_grad.clone(), b_grad.clone(), *(p.clone() for p in params)]
    plan = rng.HeavyBallPlan(params, [0.0, 0.0], 0.9, 0.1)
    for velocity in ([torch.zeros(K, 3, 4), torch.zeros(K, 5)],  # contiguous, not the gradient's transposed memory
                     [torch.zeros(K, 4, 3, dtype=torch.float64).transpose(1, 2), torch.zeros(K, 7)[:, :5]]):
        assert not rng.NormalAdder(layout, n)(rng.Keys(SEEDS[:K]), STREAMS[0], 1.0, [w_grad, b_grad], (plan, velocity))
    for got, want in zip([w_grad, b_grad, *params], before):
        assert torch.equal(got, want)
