"""Built-in datasets: scikit-learn's digits and breast_cancer, a seeded synthetic set, local MNIST and CIFAR-10."""

from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, PositiveInt
from sklearn.datasets import load_breast_cancer, load_digits, make_classification

from arena.data import Dataset, DatasetLoader, minmax_scale
from arena.hookspecs import hookimpl


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Digits(DatasetLoader):
    """8×8 grey-scale digits (1,797 images, 10 classes), pixels scaled from [0, 16] to [0, 1]."""

    name = "digits"

    def load(self, params: BaseModel) -> Dataset:
        d = load_digits()
        return Dataset("digits", (d.data / 16.0).astype(np.float32), d.target.astype(np.int64), 10, "image", (1, 8, 8))


class BreastCancer(DatasetLoader):
    """Wisconsin breast cancer (569 records, 30 features, binary), each feature min-max scaled to [0, 1]."""

    name = "breast_cancer"

    def load(self, params: BaseModel) -> Dataset:
        d = load_breast_cancer()
        return Dataset("breast_cancer", minmax_scale(d.data), d.target.astype(np.int64), 2, "tabular", (30,))


class SyntheticParams(_Params):
    n: PositiveInt = 2000
    features: PositiveInt = 20
    classes: PositiveInt = 2
    seed: int = 0


class Synthetic(DatasetLoader):
    """A seeded classification problem of any size (scikit-learn's make_classification), min-max scaled."""

    name = "synthetic"
    Params = SyntheticParams

    def load(self, params: SyntheticParams) -> Dataset:
        informative = max(2, min(params.features, params.classes.bit_length() + 2))
        X, y = make_classification(
            n_samples=params.n,
            n_features=params.features,
            n_informative=min(informative, params.features),
            n_redundant=0,
            n_classes=params.classes,
            n_clusters_per_class=1,
            random_state=params.seed,
        )
        return Dataset("synthetic", minmax_scale(X), y.astype(np.int64), params.classes, "tabular", (params.features,))


class LocalParams(_Params):
    path: Path
    split: str = "train"
    limit: PositiveInt | None = None


def _open(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()


def read_idx(path: Path) -> np.ndarray:
    """Parse one IDX file (MNIST's format): magic, dimensions, then unsigned bytes."""
    raw = _open(path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    ndim = raw[3]
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: header promises {dims} but holds {data.size} bytes")
    return data.reshape(dims)


def _find(directory: Path, stem: str) -> Path:
    for candidate in (directory / stem, directory / f"{stem}.gz"):
        if candidate.exists():
            return candidate
    raise ValueError(f"{directory}: missing {stem} (or {stem}.gz)")


class MNIST(DatasetLoader):
    """Local MNIST IDX files in ``path`` (train-images-idx3-ubyte, train-labels-idx1-ubyte, or t10k-* for test)."""

    name = "mnist"
    Params = LocalParams

    def load(self, params: LocalParams) -> Dataset:
        prefix = {"train": "train", "test": "t10k"}.get(params.split)
        if prefix is None:
            raise ValueError("split: must be 'train' or 'test'")
        if not params.path.is_dir():
            raise ValueError(f"path: {params.path} is not a directory")
        images = read_idx(_find(params.path, f"{prefix}-images-idx3-ubyte"))
        labels = read_idx(_find(params.path, f"{prefix}-labels-idx1-ubyte"))
        if len(images) != len(labels):
            raise ValueError(f"path: {params.path}: {len(images)} images but {len(labels)} labels")
        n = min(len(labels), params.limit or len(labels))
        X = (images[:n].reshape(n, -1) / 255.0).astype(np.float32)
        return Dataset("mnist", X, labels[:n].astype(np.int64), 10, "image", (1, *images.shape[1:]))


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles CIFAR-10's python batches: dicts, lists, bytes (via codecs.encode) and numpy arrays only."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str) -> object:
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a CIFAR-10 batch")
        import codecs

        import numpy._core.multiarray as multiarray

        if module == "_codecs":
            return codecs.encode
        return multiarray._reconstruct if name == "_reconstruct" else getattr(np, name)


def read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR-10 python batch: uint8 images [n, 3072] and labels [n]."""
    with open(path, "rb") as f:
        batch = _ArrayUnpickler(f, encoding="bytes").load()
    if not isinstance(batch, dict):
        raise ValueError(f"{path}: not a CIFAR-10 batch")
    data = batch.get(b"data", batch.get("data"))
    labels = batch.get(b"labels", batch.get("labels"))
    if data is None or labels is None:
        raise ValueError(f"{path}: CIFAR-10 batch without data or labels")
    return np.asarray(data, dtype=np.uint8).reshape(len(labels), -1), np.asarray(labels, dtype=np.int64)


class CIFAR10(DatasetLoader):
    """Local CIFAR-10 python batches in ``path`` (data_batch_1..5 for train, test_batch for test)."""

    name = "cifar10"
    Params = LocalParams

    def load(self, params: LocalParams) -> Dataset:
        if not params.path.is_dir():
            raise ValueError(f"path: {params.path} is not a directory")
        if params.split == "train":
            files = sorted(params.path.glob("data_batch_*"))
        elif params.split == "test":
            files = [p for p in [params.path / "test_batch"] if p.exists()]
        else:
            raise ValueError("split: must be 'train' or 'test'")
        if not files:
            raise ValueError(f"path: {params.path} holds no CIFAR-10 {params.split} batches")
        parts = [read_cifar_batch(p) for p in files]
        X = np.concatenate([p[0] for p in parts])
        y = np.concatenate([p[1] for p in parts])
        n = min(len(y), params.limit or len(y))
        return Dataset("cifar10", (X[:n] / 255.0).astype(np.float32), y[:n], 10, "image", (3, 32, 32))


@hookimpl
def register_datasets(register) -> None:  # noqa: ANN001
    for loader in (Digits(), BreastCancer(), Synthetic(), MNIST(), CIFAR10()):
        register(loader)
