"""Built-in datasets: shipped sets scaled to [0, 1], seeded synthetic data, and local MNIST / CIFAR-10 files."""

from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest

from arena_plugins.datasets import CIFAR10, MNIST, BreastCancer, Digits, LocalParams, Synthetic, SyntheticParams


def test_shipped_datasets_are_scaled_to_unit_range() -> None:
    digits = Digits().load(Digits.Params())
    cancer = BreastCancer().load(BreastCancer.Params())
    assert digits.X.shape == (1797, 64) and digits.n_classes == 10 and digits.shape == (1, 8, 8)
    assert cancer.X.shape == (569, 30) and cancer.n_classes == 2
    for d in (digits, cancer):
        assert d.X.dtype == np.float32 and d.X.min() == 0.0 and d.X.max() == 1.0
    assert digits.fingerprint() == Digits().load(Digits.Params()).fingerprint()


def test_synthetic_is_seeded_and_sized() -> None:
    a = Synthetic().load(SyntheticParams(n=300, features=7, classes=3, seed=1))
    b = Synthetic().load(SyntheticParams(n=300, features=7, classes=3, seed=1))
    c = Synthetic().load(SyntheticParams(n=300, features=7, classes=3, seed=2))
    assert a.X.shape == (300, 7) and set(np.unique(a.y)) == {0, 1, 2}
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()


def write_idx(path: Path, array: np.ndarray, compress: bool = False) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    raw = header + array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(raw) if compress else raw)


@pytest.mark.parametrize("compress", [False, True])
def test_mnist_idx_files(tmp_path: Path, compress: bool) -> None:
    images = np.arange(5 * 28 * 28).reshape(5, 28, 28) % 256
    labels = np.array([3, 1, 4, 1, 5])
    suffix = ".gz" if compress else ""
    write_idx(tmp_path / f"train-images-idx3-ubyte{suffix}", images, compress)
    write_idx(tmp_path / f"train-labels-idx1-ubyte{suffix}", labels, compress)
    d = MNIST().load(LocalParams(path=tmp_path, limit=4))
    assert d.X.shape == (4, 784) and d.shape == (1, 28, 28)
    assert np.array_equal(d.y, labels[:4])
    assert d.X[0, 255] == pytest.approx(255 / 255) and d.X[0, 1] == pytest.approx(1 / 255)


def test_mnist_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="missing train-images-idx3-ubyte"):
        MNIST().load(LocalParams(path=tmp_path))
    (tmp_path / "train-images-idx3-ubyte").write_bytes(b"garbage!")
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(b"garbage!")
    with pytest.raises(ValueError, match="not an IDX file"):
        MNIST().load(LocalParams(path=tmp_path))


def test_cifar10_batches(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    for i in (1, 2):
        batch = {b"data": rng.integers(0, 256, (3, 3072), dtype=np.uint8), b"labels": [i, 0, 9]}
        (tmp_path / f"data_batch_{i}").write_bytes(pickle.dumps(batch, protocol=2))
    d = CIFAR10().load(LocalParams(path=tmp_path))
    assert d.X.shape == (6, 3072) and d.shape == (3, 32, 32)
    assert list(d.y) == [1, 0, 9, 2, 0, 9] and d.X.min() >= 0.0 and d.X.max() <= 1.0


class Evil:
    def __reduce__(self):
        return (print, ("executed",))


def test_cifar10_loader_refuses_anything_but_arrays(tmp_path: Path, capsys) -> None:
    (tmp_path / "data_batch_1").write_bytes(pickle.dumps({b"data": Evil(), b"labels": [0]}))
    with pytest.raises(pickle.UnpicklingError, match="refusing"):
        CIFAR10().load(LocalParams(path=tmp_path))
    assert "executed" not in capsys.readouterr().out
