"""Built-in datasets: scikit-learn's digits and breast_cancer, a seeded synthetic set, local MNIST, CIFAR-10 and
CIFAR-100."""

from __future__ import annotations

import gzip
import io
import math
import pickle
import stat
import struct
import zlib
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from arena import Dataset, DatasetLoader, PluginParams, available_memory, hookimpl, minmax_scale

MAX_FILE_BYTES = 1 << 30
"""Largest data file read or decompressed (MNIST's largest file is 47 MB, a CIFAR-10 batch 31 MB)."""
SYNTHETIC_BYTES_PER_VALUE = 3 * 8
"""Peak bytes per generated value: make_classification's float64 matrix, its scaled copy and working space."""

# What a corrupt or truncated data file raises while being read (a hostile pickle raises UnpicklingError).
_CORRUPT = (OSError, EOFError, zlib.error, struct.error, pickle.UnpicklingError, ValueError, TypeError,
            IndexError, KeyError, AttributeError, MemoryError, OverflowError)


class _Params(PluginParams):
    """Unknown keys forbidden; strict types (``true`` is not a size)."""

    model_config = ConfigDict(strict=True)


class Digits(DatasetLoader):
    """8×8 grey-scale digits (1,797 images, 10 classes), pixels scaled from [0, 16] to [0, 1]."""

    name = "digits"

    def load(self, params: BaseModel) -> Dataset:
        from sklearn.datasets import load_digits  # scikit-learn takes 0.4 s to import; registering needs none of it

        d = load_digits()
        return Dataset("digits", (d.data / 16.0).astype(np.float32), d.target.astype(np.int64), 10, "image", (1, 8, 8))


class BreastCancer(DatasetLoader):
    """Wisconsin breast cancer (569 records, 30 features, binary), each feature min-max scaled to [0, 1]."""

    name = "breast_cancer"

    def load(self, params: BaseModel) -> Dataset:
        from sklearn.datasets import load_breast_cancer

        d = load_breast_cancer()
        return Dataset("breast_cancer", minmax_scale(d.data), d.target.astype(np.int64), 2, "tabular", (30,))


class SyntheticParams(_Params):
    n: PositiveInt = 2000
    features: PositiveInt = 20
    classes: PositiveInt = Field(default=2, ge=2)
    seed: int = Field(default=0, ge=0, lt=2**32, description="scikit-learn's random_state")


def check_fits(field: str, n: int, features: int) -> None:
    """Refuse, before allocating, a data set of ``n`` × ``features`` values that cannot fit in memory."""
    need, have = n * features * SYNTHETIC_BYTES_PER_VALUE, available_memory()
    if need > have:
        raise ValueError(f"{field}: {n} records x {features} features need about {need / 2**30:.3g} GiB to "
                         f"generate, more than the {have / 2**30:.3g} GiB of memory available")


class Synthetic(DatasetLoader):
    """A seeded classification problem of any size (scikit-learn's make_classification), min-max scaled."""

    name = "synthetic"
    Params = SyntheticParams

    def load(self, params: SyntheticParams) -> Dataset:  # type: ignore[override]  # narrowed: the loader's own Params (plugin contract)
        check_fits("n" if params.n >= params.features else "features", params.n, params.features)
        informative = max(2, min(params.features, params.classes.bit_length() + 2))
        from sklearn.datasets import make_classification

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
    path: Path = Field(strict=False)
    split: str = "train"
    limit: PositiveInt | None = None


def regular_file(path: Path) -> Path:
    """``path`` when it is a regular file of sane size; a FIFO, device or directory could block or never end,
    so it is refused before any read."""
    try:
        info = path.stat()
    except OSError as exc:
        raise ValueError(f"path: {path}: cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"path: {path}: not a regular file")
    if info.st_size > MAX_FILE_BYTES:
        raise ValueError(f"path: {path}: {info.st_size} bytes, more than the {MAX_FILE_BYTES} a data file may have")
    return path


def _open(path: Path) -> bytes:
    """The file's bytes, gunzipped for ``.gz``; decompression stops past MAX_FILE_BYTES (a zip bomb)."""
    with open(regular_file(path), "rb") as f:
        if path.suffix != ".gz":
            return f.read()
        raw = gzip.GzipFile(fileobj=f).read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        raise ValueError(f"path: {path}: decompresses to more than {MAX_FILE_BYTES} bytes")
    return raw


def corrupt(path: Path, exc: BaseException) -> ValueError:
    """The one-line error for a data file that cannot be parsed, naming the file and the parser's complaint."""
    text = str(exc)
    if text.startswith("path: "):
        return ValueError(text)
    if isinstance(exc, RefusedPickle):
        return RefusedPickle(f"path: {path}: {text}")
    return ValueError(f"path: {path}: corrupt or truncated ({type(exc).__name__}: {text or 'no detail'})")


def read_idx(path: Path) -> np.ndarray:
    """Parse one IDX file (MNIST's format): magic, dimensions, then unsigned bytes; any damage is a ValueError
    naming the file."""
    try:
        raw = _open(path)
    except _CORRUPT as exc:
        raise corrupt(path, exc) from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08 or raw[3] == 0 or len(raw) < 4 + 4 * raw[3]:
        raise ValueError(f"path: {path}: not an IDX file of unsigned bytes")
    ndim = raw[3]
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if 0 in dims[1:]:
        raise ValueError(f"path: {path}: header gives a zero dimension {dims}: no image has zero width or height")
    if data.size != math.prod(dims):
        raise ValueError(f"path: {path}: header promises {dims} but holds {data.size} bytes (truncated?)")
    return data.reshape(dims)


def _find(directory: Path, stem: str) -> Path:
    for candidate in (directory / stem, directory / f"{stem}.gz"):
        if candidate.exists() or candidate.is_symlink():
            return regular_file(candidate)
    raise ValueError(f"{directory}: missing {stem} (or {stem}.gz)")


class MNIST(DatasetLoader):
    """Local MNIST IDX files in ``path`` (train-images-idx3-ubyte, train-labels-idx1-ubyte, or t10k-* for test)."""

    name = "mnist"
    Params = LocalParams

    def load(self, params: LocalParams) -> Dataset:  # type: ignore[override]  # narrowed: the loader's own Params (plugin contract)
        prefix = {"train": "train", "test": "t10k"}.get(params.split)
        if prefix is None:
            raise ValueError("split: must be 'train' or 'test'")
        if not params.path.is_dir():
            raise ValueError(f"path: {params.path} is not a directory")
        images = read_idx(_find(params.path, f"{prefix}-images-idx3-ubyte"))
        labels = read_idx(_find(params.path, f"{prefix}-labels-idx1-ubyte"))
        if images.ndim != 3 or labels.ndim != 1:
            raise ValueError(f"path: {params.path}: expected images [n, rows, cols] and labels [n], got shapes "
                             f"{images.shape} and {labels.shape}")
        if len(images) != len(labels):
            raise ValueError(f"path: {params.path}: {len(images)} images but {len(labels)} labels")
        if labels.size and labels.max() > 9:
            raise ValueError(f"path: {params.path}: labels must be digits 0-9, found {int(labels.max())}")
        n = min(len(labels), params.limit or len(labels))
        X = (images[:n].reshape(n, -1) / 255.0).astype(np.float32)
        return Dataset("mnist", X, labels[:n].astype(np.int64), 10, "image", (1, *images.shape[1:]))


class RefusedPickle(pickle.UnpicklingError, ValueError):  # noqa: N818 - public name, kept (it is a refusal, not a bug)
    """A CIFAR batch asked to build something other than arrays: refused, as a hostile file would be."""


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles CIFAR-10's and CIFAR-100's python batches: dicts, lists, bytes (via codecs.encode) and numpy
    arrays only."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str) -> object:
        if (module, name) not in self.ALLOWED:
            raise RefusedPickle(f"refusing to load {module}.{name} from a CIFAR batch")
        import codecs

        import numpy._core.multiarray as multiarray

        if module == "_codecs":
            return codecs.encode
        return multiarray._reconstruct if name == "_reconstruct" else getattr(np, name)


def read_cifar_batch(path: Path, labels_key: str = "labels", classes: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR python batch: uint8 images [n, 3072] and labels [n] (CIFAR-10's ``labels``; CIFAR-100's
    ``fine_labels`` or ``coarse_labels``, 100 or 20 classes); a corrupt, truncated or hostile file is a
    ValueError naming it."""
    title = "CIFAR-10" if classes == 10 else "CIFAR-100"
    try:
        with open(regular_file(path), "rb") as f:
            raw = f.read()
        batch = _ArrayUnpickler(io.BytesIO(raw), encoding="bytes").load()  # lengths past the end: truncated
        if not isinstance(batch, dict):
            raise ValueError(f"path: {path}: not a {title} batch (a {type(batch).__name__}, not a dict)")
        data = batch.get(b"data", batch.get("data"))
        labels = batch.get(labels_key.encode(), batch.get(labels_key))
        if data is None or labels is None:
            raise ValueError(f"path: {path}: {title} batch without data or {labels_key}")
        X, y = np.asarray(data, dtype=np.uint8).reshape(len(labels), -1), np.asarray(labels, dtype=np.int64)
    except _CORRUPT as exc:
        raise corrupt(path, exc) from None
    if X.shape[1] != 3 * 32 * 32 or y.ndim != 1 or (y.size and (y.min() < 0 or y.max() >= classes)):
        raise ValueError(f"path: {path}: expected images [n, 3072] and {labels_key} 0-{classes - 1}, got {X.shape} "
                         f"and {y.shape}")
    return X, y


class CIFAR10(DatasetLoader):
    """Local CIFAR-10 python batches in ``path`` (data_batch_1..5 for train, test_batch for test)."""

    name = "cifar10"
    Params = LocalParams

    def load(self, params: LocalParams) -> Dataset:  # type: ignore[override]  # narrowed: the loader's own Params (plugin contract)
        if not params.path.is_dir():
            raise ValueError(f"path: {params.path} is not a directory")
        if params.split == "train":
            files = sorted(params.path.glob("data_batch_*"))
        elif params.split == "test":
            files = [p for p in [params.path / "test_batch"] if p.exists() or p.is_symlink()]
        else:
            raise ValueError("split: must be 'train' or 'test'")
        if not files:
            raise ValueError(f"path: {params.path} holds no CIFAR-10 {params.split} batches")
        parts = [read_cifar_batch(p) for p in files]
        X = np.concatenate([p[0] for p in parts])
        y = np.concatenate([p[1] for p in parts])
        n = min(len(y), params.limit or len(y))
        return Dataset("cifar10", (X[:n] / 255.0).astype(np.float32), y[:n], 10, "image", (3, 32, 32))


class CIFAR100Params(LocalParams):
    labels: Literal["fine", "coarse"] = Field(default="fine", description="fine: 100 classes; coarse: 20 superclasses")


class CIFAR100(DatasetLoader):
    """Local CIFAR-100 python files in ``path`` (``train`` or ``test``, as cifar-100-python.tar.gz unpacks)."""

    name = "cifar100"
    Params = CIFAR100Params

    def load(self, params: CIFAR100Params) -> Dataset:  # type: ignore[override]  # narrowed: the loader's own Params (plugin contract)
        if not params.path.is_dir():
            raise ValueError(f"path: {params.path} is not a directory")
        if params.split not in ("train", "test"):
            raise ValueError("split: must be 'train' or 'test'")
        file = params.path / params.split
        if not (file.exists() or file.is_symlink()):
            raise ValueError(f"path: {params.path} holds no CIFAR-100 file {params.split!r}")
        classes = 100 if params.labels == "fine" else 20
        X, y = read_cifar_batch(file, f"{params.labels}_labels", classes)
        n = min(len(y), params.limit or len(y))
        return Dataset("cifar100", (X[:n] / 255.0).astype(np.float32), y[:n], classes, "image", (3, 32, 32))


@hookimpl
def register_datasets(register) -> None:  # noqa: ANN001
    for loader in (Digits, BreastCancer, Synthetic, MNIST, CIFAR10, CIFAR100):
        register(loader)
