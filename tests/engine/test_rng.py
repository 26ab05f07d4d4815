"""Counter RNG: per-model streams independent of batch composition, and sane distributions."""

import pytest
import torch

from arena.engine import rng

SEEDS = torch.tensor([0, 1, 2**40 + 7, -5, 123456789], dtype=torch.int64)


@pytest.mark.parametrize("draw", [rng.uniform, rng.normal])
def test_model_stream_depends_only_on_its_seed(draw):
    s = rng.stream(rng.Purpose.NOISE, 3)
    batch = draw(SEEDS, s, (4, 6), torch.float64)
    assert batch.shape == (5, 4, 6)
    for k in range(len(SEEDS)):
        assert torch.equal(batch[k], draw(SEEDS[k : k + 1], s, (4, 6), torch.float64)[0])
    other = draw(torch.tensor([99, 2**40 + 7]), s, (4, 6), torch.float64)
    assert torch.equal(other[1], batch[2])


def test_streams_and_seeds_differ():
    draws = [
        rng.uniform(torch.tensor([seed]), rng.stream(purpose, index), 64)
        for seed in (0, 1, 2**32)  # 2**32 differs from 0 only in the high word
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


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_uniform_moments_and_open_interval(dtype):
    u = rng.uniform(torch.tensor([7, 8]), 0, 100_000, dtype)
    assert u.dtype == dtype
    assert (u > 0).all() and (u < 1).all()
    assert abs(u.mean().item() - 0.5) < 0.005
    assert abs(u.var().item() - 1 / 12) < 0.002


def test_normal_moments_and_pair_independence():
    z = rng.normal(torch.tensor([11]), 5, 100_001, torch.float64)[0]
    assert abs(z.mean().item()) < 0.01
    assert abs(z.std().item() - 1.0) < 0.01
    assert abs((z.abs() < 1.96).double().mean().item() - 0.95) < 0.005
    cos, sin = z[:-1:2], z[1::2]  # the two outputs of each Box-Muller pair
    assert abs(torch.corrcoef(torch.stack([cos, sin]))[0, 1].item()) < 0.015
    assert abs(torch.corrcoef(torch.stack([cos**2, sin**2]))[0, 1].item()) < 0.015
    assert torch.equal(rng.normal(torch.tensor([11]), 5, 7, torch.float64)[0], z[:7])


def test_bernoulli_rate():
    b = rng.bernoulli(torch.tensor([1, 2]), 9, 100_000, 0.04)
    assert b.dtype == torch.bool
    assert abs(b.double().mean().item() - 0.04) < 0.002
    assert rng.bernoulli(torch.tensor([1]), 9, 1000, 1.0).all()


def test_permutation_is_a_permutation_per_model():
    perms = rng.permutation(SEEDS, rng.stream(rng.Purpose.SHUFFLE, 0), 1000)
    assert torch.equal(perms.sort(dim=1).values, torch.arange(1000).expand(5, 1000))
    assert not torch.equal(perms[0], perms[1])


def _lowbias32(x: int) -> int:
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    return x ^ (x >> 16)


def test_bits_equal_plain_32_bit_integer_reference():
    """The int64 tensor emulation of 32-bit multiplication is exact, for any 64-bit seed."""
    seeds = [0, 2**63 - 1, -(2**63), 2**40 + 7]
    stream_id = rng.stream(rng.Purpose.POISSON, 12345)
    out = rng.bits(torch.tensor(seeds, dtype=torch.int64), stream_id, 50)
    for row, seed in zip(out.tolist(), seeds):
        lo, hi = seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF
        a = _lowbias32(_lowbias32(_lowbias32(lo ^ 0x9E3779B9) ^ hi) ^ stream_id)
        b = _lowbias32(_lowbias32(_lowbias32(lo ^ 0x85EBCA6B) ^ hi) ^ stream_id)
        assert row == [_lowbias32(_lowbias32(c ^ a) ^ b) for c in range(50)]


def test_prepared_keys_draw_exactly_what_raw_seeds_draw():
    keys = rng.Keys(SEEDS)
    assert len(keys) == len(SEEDS)
    for stream_id in (rng.stream(rng.Purpose.NOISE, 0), rng.stream(rng.Purpose.POISSON, 77)):
        assert torch.equal(rng.bits(keys, stream_id, 33), rng.bits(SEEDS, stream_id, 33))
        assert torch.equal(rng.normal(keys, stream_id, (3, 5)), rng.normal(SEEDS, stream_id, (3, 5)))
        assert torch.equal(rng.bernoulli(keys, stream_id, 40, 0.3), rng.bernoulli(SEEDS, stream_id, 40, 0.3))
        assert torch.equal(rng.permutation(keys, stream_id, 40), rng.permutation(SEEDS, stream_id, 40))
    assert torch.equal(rng.bits(keys, 5, 8), rng.bits(keys, 5, 8))  # drawing leaves the prepared keys unchanged
