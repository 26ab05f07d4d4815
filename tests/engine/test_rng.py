"""Counter RNG: per-model streams independent of batch composition, bit-exact against a plain-integer reference of
SplitMix64, and sound distributions (moments, Kolmogorov–Smirnov, independence across pairs, streams and models)."""

import math

import pytest
import scipy.stats
import torch

from arena.engine import rng

SEEDS = torch.tensor([0, 1, 2**40 + 7, -5, 123456789], dtype=torch.int64)
U64 = 2**64 - 1


@pytest.mark.parametrize("draw", [rng.uniform, rng.normal])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_model_stream_depends_only_on_its_seed(draw, dtype):
    s = rng.stream(rng.Purpose.NOISE, 3)
    batch = draw(SEEDS, s, (4, 7), dtype)
    assert batch.shape == (5, 4, 7) and batch.dtype == dtype
    for k in range(len(SEEDS)):
        assert torch.equal(batch[k], draw(SEEDS[k : k + 1], s, (4, 7), dtype)[0])
    other = draw(torch.tensor([99, 2**40 + 7]), s, (4, 7), dtype)
    assert torch.equal(other[1], batch[2])


def test_a_workspace_draws_exactly_what_a_fresh_draw_gives_and_is_reused():
    ws = rng.Workspace()
    keys = rng.Keys(SEEDS)
    for step in range(3):
        for n in (19, 20, 19):  # odd and even sizes, so the buffers are resized and reused
            s = rng.stream(rng.Purpose.NOISE, step)
            assert torch.equal(rng.normal(keys, s, n, workspace=ws), rng.normal(SEEDS, s, n))
    first = rng.normal(keys, 1, 20, workspace=ws)
    second = rng.normal(keys, 2, 20, workspace=ws)
    assert first.data_ptr() == second.data_ptr()  # the same memory: a draw is valid until the next one


def test_streams_and_seeds_differ():
    draws = [
        rng.uniform(torch.tensor([seed]), rng.stream(purpose, index), 64)
        for seed in (0, 1, 2**32, -1)  # 2**32 differs from 0 only in the high word
        for purpose in rng.Purpose
        for index in (0, 1)
    ]
    flat = torch.cat(draws)
    assert len({tuple(row.tolist()) for row in flat}) == len(draws)


def test_stream_ids_are_distinct_and_bounded():
    ids = {rng.stream(p, i) for p in rng.Purpose for i in (0, 1, 2**24 - 1)}
    assert len(ids) == 3 * len(rng.Purpose)
    with pytest.raises(ValueError):
        rng.stream(rng.Purpose.POISSON, 2**24)


def _reference_words(seed: int, stream_id: int, n: int) -> list[int]:
    """SplitMix64 in plain Python integers: key = mix(mix(seed ^ salt) ^ mix(stream)), word c = mix(key + (c+1)γ)."""
    key = rng.mix64(rng.mix64((seed & U64) ^ 0x243F6A8885A308D3) ^ rng.mix64(stream_id))
    return [rng.mix64(key + (c + 1) * 0x9E3779B97F4A7C15) for c in range(n)]


def test_mix64_is_splitmix64():
    """The published first outputs of SplitMix64 seeded with 0 (state += γ, then the finaliser)."""
    assert rng.mix64(0x9E3779B97F4A7C15) == 0xE220A8397B1DCDAF
    assert rng.mix64(2 * 0x9E3779B97F4A7C15) == 0x6E789E6AA1B965F4


def test_bits_equal_plain_64_bit_integer_reference():
    """The int64 tensor arithmetic (wrapping products, masked logical shifts) is exact, for any 64-bit seed."""
    seeds = [0, 2**63 - 1, -(2**63), 2**40 + 7, -1]
    stream_id = rng.stream(rng.Purpose.POISSON, 12345)
    out = rng.bits(torch.tensor(seeds, dtype=torch.int64), stream_id, 50)
    for row, seed in zip(out.tolist(), seeds):
        assert [w & U64 for w in row] == _reference_words(seed, stream_id, 50)


def test_normal_equals_box_muller_of_the_reference_words():
    seed, stream_id, n = 2**40 + 7, rng.stream(rng.Purpose.NOISE, 9), 9
    h = (n + 1) // 2
    words = _reference_words(seed, stream_id, h)
    expected = torch.empty(2 * h, dtype=torch.float64)
    for j, w in enumerate(words):
        u1, u2 = ((w >> 40) + 1) / 2**24, ((w >> 8) & (2**24 - 1)) / 2**24
        expected[j] = math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2)
        expected[h + j] = math.sqrt(-2 * math.log(u1)) * math.sin(2 * math.pi * u2)
    got = rng.normal(torch.tensor([seed]), stream_id, n)[0].double()
    torch.testing.assert_close(got, expected[:n], atol=2e-6, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_uniform_moments_open_interval_and_ks(dtype):
    u = rng.uniform(torch.tensor([7, 8]), 0, 100_000, dtype)
    assert u.dtype == dtype
    assert (u > 0).all() and (u < 1).all()
    assert abs(u.mean().item() - 0.5) < 0.005
    assert abs(u.var().item() - 1 / 12) < 0.002
    assert scipy.stats.kstest(u[0].double().numpy(), "uniform").pvalue > 1e-3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_normal_moments_tails_and_ks(dtype):
    z = rng.normal(torch.tensor([11]), 5, 200_001, dtype)[0].double()
    assert abs(z.mean().item()) < 0.01  # 4.5 standard errors
    assert abs(z.std().item() - 1.0) < 0.01
    assert abs(((z**4).mean().item()) - 3.0) < 0.06  # kurtosis
    assert abs((z.abs() < 1.96).double().mean().item() - 0.95) < 0.003
    assert abs((z.abs() > 3.5).double().mean().item() - 4.65e-4) < 2.5e-4  # the tails reach past 3.5
    assert scipy.stats.kstest(z.numpy(), "norm").pvalue > 1e-3


@pytest.mark.slow
def test_normals_are_independent_within_pairs_across_streams_and_across_models():
    n = 100_000
    z = rng.normal(torch.tensor([11, 12, 13]), 5, n, torch.float64)
    cos, sin = z[0, : n // 2], z[0, n // 2 :]  # the two outputs of each Box–Muller pair
    other_stream = rng.normal(torch.tensor([11]), 6, n, torch.float64)[0]
    bound = 4.5 / math.sqrt(n // 2)
    for a, b in [(cos, sin), (z[0], z[1]), (z[1], z[2]), (z[0], other_stream), (z[0, 1:], z[0, :-1])]:
        assert abs(torch.corrcoef(torch.stack([a, b]))[0, 1].item()) < bound
        assert abs(torch.corrcoef(torch.stack([a * a, b * b]))[0, 1].item()) < bound
    # seeds one apart and streams one apart share nothing: their difference is normal with variance 2
    assert scipy.stats.kstest((z[0] - z[1]).numpy() / math.sqrt(2), "norm").pvalue > 1e-3


def test_bernoulli_rate():
    b = rng.bernoulli(torch.tensor([1, 2]), 9, 100_000, 0.04)
    assert b.dtype == torch.bool
    assert abs(b.double().mean().item() - 0.04) < 0.002
    assert rng.bernoulli(torch.tensor([1]), 9, 1000, 1.0).all()
    assert not rng.bernoulli(torch.tensor([1]), 9, 1000, 0.0).any()


def test_permutation_is_a_permutation_per_model():
    perms = rng.permutation(SEEDS, rng.stream(rng.Purpose.SHUFFLE, 0), 1000)
    assert torch.equal(perms.sort(dim=1).values, torch.arange(1000).expand(5, 1000))
    assert not torch.equal(perms[0], perms[1])


def test_prepared_keys_draw_exactly_what_raw_seeds_draw():
    keys = rng.Keys(SEEDS)
    assert len(keys) == len(SEEDS)
    for stream_id in (rng.stream(rng.Purpose.NOISE, 0), rng.stream(rng.Purpose.POISSON, 77)):
        assert torch.equal(rng.bits(keys, stream_id, 33), rng.bits(SEEDS, stream_id, 33))
        assert torch.equal(rng.normal(keys, stream_id, (3, 5)), rng.normal(SEEDS, stream_id, (3, 5)))
        assert torch.equal(rng.bernoulli(keys, stream_id, 40, 0.3), rng.bernoulli(SEEDS, stream_id, 40, 0.3))
        assert torch.equal(rng.permutation(keys, stream_id, 40), rng.permutation(SEEDS, stream_id, 40))
    assert torch.equal(rng.bits(keys, 5, 8), rng.bits(keys, 5, 8))  # drawing leaves the prepared keys unchanged


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_draw_from_several_streams_is_each_stream_drawn_alone(dtype):
    """Several steps' draws in one call (the trainer's noise and Poisson masks) change no number."""
    keys, ids = rng.Keys(SEEDS), [rng.stream(rng.Purpose.NOISE, t) for t in (0, 3, 7)]
    for n in (1, 20, 70_001):  # the last one spans several of the float32 draw's column blocks
        many = rng.normal(keys, ids, n, dtype)
        assert many.shape == (3, len(SEEDS), n)
        for s, stream_id in enumerate(ids):
            assert torch.equal(many[s], rng.normal(SEEDS, stream_id, n, dtype))
    masks = rng.bernoulli(keys, ids, 50, 0.3)
    assert all(torch.equal(masks[s], rng.bernoulli(SEEDS, i, 50, 0.3)) for s, i in enumerate(ids))
