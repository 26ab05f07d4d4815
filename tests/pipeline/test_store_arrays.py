"""Cache entries read as numpy arrays (``TensorCache.get_arrays``, what a leaderboard reads without torch) are
verified exactly as tensors are: the numpy digest equals the tensor digest, and a flipped bit or a foreign secret
makes the entry a miss."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from arena.pipeline.tensorcache import TensorCache, arrays_sha256, tensors_sha256

ENTRY = {"f64": torch.randn(5, 3, dtype=torch.float64), "f32": torch.randn(4).float(), "f16": torch.randn(2).half(),
         "i64": torch.arange(4), "u8": torch.tensor([1, 200], dtype=torch.uint8), "bool": torch.tensor([True, False]),
         "empty": torch.zeros(0, 2), "strided": torch.randn(3, 4).T}


def test_the_numpy_digest_of_an_entry_is_its_tensor_digest() -> None:
    assert arrays_sha256({k: v.numpy() for k, v in ENTRY.items()}) == tensors_sha256(ENTRY)
    for name, t in ENTRY.items():  # each dtype on its own, so one that differs is named
        assert arrays_sha256({name: t.numpy()}) == tensors_sha256({name: t}), name


@pytest.mark.parametrize("secret", [None, b"s" * 32])
def test_an_entry_read_as_arrays_is_verified_like_tensors(tmp_path, capsys, secret) -> None:
    cache = TensorCache(tmp_path, lambda: secret)
    cache.put("artifacts", "k", ENTRY)
    read = cache.get_arrays("artifacts", "k")
    assert read is not None and set(read) == set(ENTRY)
    assert all(isinstance(v, np.ndarray) and np.array_equal(v, ENTRY[k].numpy()) for k, v in read.items())
    path = cache.path("artifacts", "k")
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x40
    path.write_bytes(bytes(data))
    assert cache.get_arrays("artifacts", "k") is None
    assert "fails its sha256 check" in capsys.readouterr().err
    if secret is not None:  # an intact entry written under another secret is not this run's
        TensorCache(tmp_path, lambda: b"o" * 32).put("artifacts", "k", ENTRY)
        assert cache.get_arrays("artifacts", "k") is None
        assert "not authenticated by this run's secret" in capsys.readouterr().err
