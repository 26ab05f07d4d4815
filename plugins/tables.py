"""Data people already have, as tables and arrays: CSV and Parquet files (numeric and categorical columns, the
label column named) and NumPy ``.npz`` / ``.npy`` arrays (Purchase100 and Texas100 as usually distributed:
``features`` and ``labels``, the labels as class ids or one-hot rows). All local, never downloaded; each file is
checked for size, shape and type before it is read, and refused with a message naming the file and the field.

Classes are the label's distinct values, sorted (the i-th becomes class i); numeric features are min-max scaled
to [0, 1] per column, categorical ones one-hot encoded with their values sorted.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field, PositiveInt

from arena import Dataset, DatasetLoader, available_memory, hookimpl, minmax_scale
from arena_plugins.datasets import MAX_FILE_BYTES, _Params, regular_file

if TYPE_CHECKING:  # pandas is imported where a table is read: it takes 0.4 s, and registering needs none of it
    import pandas as pd

MAX_CATEGORIES = 1000
"""Distinct values a categorical column may have: each becomes a feature of its own."""
BYTES_PER_VALUE = 3 * 8
"""Peak bytes per encoded value: the float64 matrix, its scaled float32 copy and working space."""
NUMERIC = "biuf"
"""NumPy dtype kinds read as numbers: bool, signed and unsigned integers, floats."""


def check_memory(field: str, where: Path, n: int, width: int) -> None:
    """Refuse, before allocating, ``n`` records of ``width`` features that cannot fit in memory."""
    need, have = n * width * BYTES_PER_VALUE, available_memory()
    if need > have:
        raise ValueError(f"{field}: {where}: {n} records x {width} features need about {need / 2**30:.3g} GiB, "
                         f"more than the {have / 2**30:.3g} GiB of memory available")


def class_ids(values: np.ndarray | pd.Series, field: str, where: Path) -> tuple[np.ndarray, int]:
    """(class ids, class count): the distinct values sorted, the i-th becoming class i; at least two."""
    values = np.asarray(values)
    if values.dtype.kind not in NUMERIC + "USO":
        raise ValueError(f"{field}: {where}: labels of type {values.dtype} are neither numbers nor strings")
    if values.dtype.kind == "f" and not np.isfinite(values).all():
        raise ValueError(f"{field}: {where}: labels include NaN or infinity")
    if values.dtype.kind == "f" and not (values == np.round(values)).all():
        raise ValueError(f"{field}: {where}: labels are fractional numbers, not classes")
    classes, ids = np.unique(values.astype(str) if values.dtype.kind == "O" else values, return_inverse=True)
    if len(classes) < 2:
        raise ValueError(f"{field}: {where}: labels take {len(classes)} value(s); a classifier needs at least 2")
    return ids.reshape(-1).astype(np.int64), len(classes)


def encode_frame(frame: pd.DataFrame, label: str, columns: list[str] | None, categorical: list[str], where: Path,
                 limit: int | None) -> tuple[np.ndarray, np.ndarray, int]:
    """(X in [0, 1], class ids, class count) from a table: the label column named, the features ``columns`` (by
    default every other column), numeric ones min-max scaled, non-numeric and ``categorical`` ones one-hot."""
    names = [str(c) for c in frame.columns]
    if label not in names:
        raise ValueError(f"label: {where}: no column {label!r} (columns: {', '.join(names[:20])})")
    features = [c for c in names if c != label] if columns is None else columns
    for field, listed in (("columns", features), ("categorical", categorical)):
        missing = [c for c in listed if c not in names]
        if missing:
            raise ValueError(f"{field}: {where}: no column(s) {', '.join(map(repr, missing))} (columns: "
                             f"{', '.join(names[:20])})")
    if label in features or not features:
        why = "the label column cannot be a feature" if features else "no feature columns besides the label"
        raise ValueError(f"columns: {where}: {why}")
    frame = frame.iloc[: limit or len(frame)].set_axis(names, axis=1)
    from pandas.api.types import is_numeric_dtype

    one_hot = {c for c in features if c in categorical or not is_numeric_dtype(frame[c])}
    for c in [label, *features]:
        holes = np.flatnonzero(frame[c].isna().to_numpy())
        if holes.size:
            raise ValueError(f"path: {where}: column {c!r} has {holes.size} missing value(s), the first in data "
                             f"row {holes[0] + 1}")
    y, n_classes = class_ids(frame[label].to_numpy(), "label", where)
    widths = {c: (frame[c].nunique() if c in one_hot else 1) for c in features}
    wide = [c for c, w in widths.items() if w > MAX_CATEGORIES]
    if wide:
        raise ValueError(f"categorical: {where}: column {wide[0]!r} has {widths[wide[0]]} distinct values, more than "
                         f"the {MAX_CATEGORIES} one-hot encoding takes; leave it out of columns")
    check_memory("path", where, len(frame), sum(widths.values()))
    parts = []
    for c in features:
        if c in one_hot:
            values = frame[c].astype(str).to_numpy()
            parts.append((values[:, None] == np.unique(values)[None, :]).astype(np.float64))
        else:
            values = frame[c].to_numpy(dtype=np.float64)
            if not np.isfinite(values).all():
                raise ValueError(f"path: {where}: column {c!r} holds infinity")
            parts.append(values[:, None])
    return minmax_scale(np.concatenate(parts, axis=1)), y, n_classes


def _parquet(path: Path) -> pd.DataFrame:
    """A Parquet file through pyarrow, its uncompressed size checked from its metadata before it is read."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError(f"path: {path}: reading Parquet needs pyarrow, which is not installed (pip install "
                         "pyarrow, or 'privacy-arena[data]')") from None
    meta = pq.ParquetFile(path).metadata
    # 8 bytes a cell once read (a number, or a string's reference) plus the encoded data: a column of one value
    # run-length encoded takes a few bytes in the file however many rows it has
    size = 8 * meta.num_rows * meta.num_columns + sum(meta.row_group(i).total_byte_size
                                                      for i in range(meta.num_row_groups))
    if size > MAX_FILE_BYTES:
        raise ValueError(f"path: {path}: {meta.num_rows} rows x {meta.num_columns} columns, about {size} bytes "
                         f"uncompressed, more than the {MAX_FILE_BYTES} a data file may have")
    return pq.read_table(path).to_pandas()


class TableParams(_Params):
    path: Path = Field(strict=False, description="a .csv, .tsv or .parquet file, one record per row")
    label: str = Field(min_length=1, description="the label column")
    columns: list[str] | None = Field(default=None, min_length=1, description="feature columns (default: all others)")
    categorical: list[str] = Field(default_factory=list, description="numeric columns to one-hot encode too")
    header: bool = Field(default=True, description="false: no header row, columns are named by position 0, 1, ...")
    limit: PositiveInt | None = None


class Table(DatasetLoader):
    """A CSV, TSV or Parquet table: the ``label`` column's values are the classes, the other columns (or
    ``columns``) the features, numbers scaled to [0, 1] and other values one-hot encoded."""

    name = "table"
    Params = TableParams

    def load(self, params: TableParams) -> Dataset:  # type: ignore[override]  # narrowed: the loader's own Params (plugin contract)
        path = regular_file(params.path)
        suffix = path.suffix.lower()
        if suffix not in (".csv", ".tsv", ".parquet", ".pq"):
            raise ValueError(f"path: {path}: not a .csv, .tsv or .parquet file (compressed tables are not read)")
        if not params.header and suffix not in (".csv", ".tsv"):
            raise ValueError("header: a Parquet file always names its columns")
        try:
            if suffix in (".parquet", ".pq"):
                frame = _parquet(path)
            else:
                import pandas as pd

                frame = pd.read_csv(path, sep="\t" if suffix == ".tsv" else ",", encoding="utf-8",
                                    low_memory=False, compression=None, header=0 if params.header else None)
        except ValueError as exc:
            if str(exc).startswith("path: "):
                raise
            raise ValueError(f"path: {path}: not a readable table ({type(exc).__name__}: {exc})") from None
        except Exception as exc:  # noqa: BLE001 - a corrupt file makes a parser raise its own errors (ArrowInvalid)
            raise ValueError(f"path: {path}: not a readable table ({type(exc).__name__}: {exc})") from None
        X, y, n_classes = encode_frame(frame, params.label, params.columns, params.categorical, path, params.limit)
        return Dataset("table", X, y, n_classes, "tabular", (X.shape[1],))


# ---- NumPy arrays ----------------------------------------------------------------------------------------------

def npy_header(f: IO[bytes], where: str) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) of a ``.npy`` stream from its header alone (no data read)."""
    try:
        version = np.lib.format.read_magic(f)
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = reader(f)
    except (ValueError, OSError, EOFError, SyntaxError, TypeError) as exc:
        raise ValueError(f"{where}: not a NumPy array ({type(exc).__name__}: {exc})") from None
    return tuple(shape), dtype


def _array(path: Path, key: str | None, field: str, kinds: str) -> np.ndarray:
    """One array of a ``.npy`` file (``key`` None) or of a ``.npz`` archive, its header checked first: its size
    (the archive's member uncompressed, a zip bomb), its type (``kinds``: no objects, no pickles)."""
    where = f"{field}: {path}" + (f" [{key}]" if key else "")
    try:
        if key is None:
            with open(path, "rb") as f:
                shape, dtype = npy_header(f, where)
                size = path.stat().st_size
        else:
            with zipfile.ZipFile(path) as archive:
                names = {n.removesuffix(".npy"): n for n in archive.namelist()}
                if key not in names:
                    raise ValueError(f"{field}: {path}: no array {key!r} (arrays: {', '.join(sorted(names))})")
                info = archive.getinfo(names[key])
                size = info.file_size
                if size > MAX_FILE_BYTES:
                    raise ValueError(f"{where}: {size} bytes uncompressed, more than the {MAX_FILE_BYTES} a data "
                                     "file may have")
                with archive.open(info) as f:
                    shape, dtype = npy_header(f, where)
        if dtype.kind not in kinds or dtype.hasobject:
            raise ValueError(f"{where}: arrays of {dtype} are not read (numbers{' or strings' if 'U' in kinds else ''} "
                             "only)")
        if int(np.prod(shape, dtype=np.float64)) * dtype.itemsize > size:
            raise ValueError(f"{where}: header promises {shape} of {dtype} but the file is {size} bytes (truncated?)")
        if key is None:
            return np.load(path, allow_pickle=False)
        with np.load(path, allow_pickle=False) as data:
            return data[key]
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError) as exc:
        if str(exc).startswith(f"{field}: "):
            raise
        raise ValueError(f"{where}: corrupt or truncated ({type(exc).__name__}: {exc})") from None


def _images_or_table(X: np.ndarray, layout: str | None, where: Path) -> tuple[np.ndarray, str, tuple[int, ...]]:
    """Flat features in [0, 1], the kind and one record's shape: 2-D tables per column; images (3-D grey
    [n, h, w], 4-D by ``layout``) as a whole, uint8 by 255."""
    if X.ndim == 2 and layout in (None, "tabular"):
        return minmax_scale(X), "tabular", (X.shape[1],)
    if X.ndim == 3 and layout in (None, "nchw"):
        X = X[:, None]
    elif X.ndim == 4 and layout == "nhwc":
        X = X.transpose(0, 3, 1, 2)
    elif X.ndim != 4 or layout != "nchw":
        raise ValueError(f"layout: {where}: features of shape {X.shape} do not fit layout {layout or 'unset'} "
                         "(2-D: tabular; 3-D: [n, h, w] grey images; 4-D: say nchw or nhwc)")
    flat = X.reshape(len(X), -1)
    if X.dtype == np.uint8:
        scaled = (flat / 255.0).astype(np.float32)
    else:
        lo, hi = float(flat.min(initial=0)), float(flat.max(initial=1))
        scaled = ((flat - lo) / (hi - lo if hi > lo else 1.0)).astype(np.float32)
    return scaled, "image", tuple(X.shape[1:])


class ArraysParams(_Params):
    path: Path = Field(strict=False, description="a .npz archive, or a .npy file of features")
    features: str = Field(default="features", description="the features' array in a .npz")
    labels: str = Field(default="labels", description="the labels' array in a .npz")
    labels_path: Path | None = Field(default=None, strict=False, description="the labels' .npy, beside a .npy path")
    layout: Literal["tabular", "nchw", "nhwc"] | None = Field(
        default=None, description="how to read features: 2-D is tabular, 3-D grey images, 4-D needs nchw or nhwc")
    limit: PositiveInt | None = None


class Arrays(DatasetLoader):
    """NumPy features and labels: a ``.npz`` with two arrays (``features``, ``labels``), or two ``.npy`` files;
    labels as class values [n] or one-hot rows [n, classes]."""

    name = "numpy"
    Params = ArraysParams

    def load(self, params: ArraysParams) -> Dataset:  # type: ignore[override]  # narrowed: the loader's own Params (plugin contract)
        path = regular_file(params.path)
        if path.suffix == ".npz":
            if params.labels_path is not None:
                raise ValueError("labels_path: only for a .npy path; a .npz names its labels' array in labels")
            X, labels = _array(path, params.features, "features", NUMERIC), _array(path, params.labels, "labels",
                                                                                   NUMERIC + "US")
        elif path.suffix == ".npy":
            if params.labels_path is None:
                raise ValueError(f"labels_path: {path} is a .npy of features: give the .npy of its labels")
            X = _array(path, None, "path", NUMERIC)
            labels = _array(regular_file(params.labels_path), None, "labels_path", NUMERIC + "US")
        else:
            raise ValueError(f"path: {path}: not a .npz or .npy file")
        return _dataset(X, labels, path, params)


def _dataset(X: np.ndarray, labels: np.ndarray, path: Path, params: Any) -> Dataset:
    """The dataset of checked arrays: one label per record, finite features, one-hot labels as class ids."""
    if X.ndim < 2 or len(X) == 0:
        raise ValueError(f"features: {path}: shape {X.shape}: need [n, ...] with n > 0 records")
    if len(labels) != len(X) or labels.ndim not in (1, 2):
        raise ValueError(f"labels: {path}: shape {labels.shape} for {len(X)} records: need one label per record")
    n = min(len(X), params.limit or len(X))
    X, labels = X[:n], labels[:n]
    check_memory("features", path, n, int(np.prod(X.shape[1:])))
    if X.dtype.kind == "f" and not np.isfinite(X).all():
        raise ValueError(f"features: {path}: features include NaN or infinity")
    if labels.ndim == 1:
        y, n_classes = class_ids(labels, "labels", path)
    elif labels.dtype.kind in NUMERIC and ((labels == 0) | (labels == 1)).all() and (labels.sum(axis=1) == 1).all():
        y, n_classes = labels.argmax(axis=1).astype(np.int64), labels.shape[1]  # one-hot: its columns are classes
    else:
        raise ValueError(f"labels: {path}: 2-D labels {labels.shape} must be one-hot rows (a single 1 each)")
    flat, kind, shape = _images_or_table(X, params.layout, path)
    return Dataset("numpy", flat, y, n_classes, kind, shape)  # type: ignore[arg-type]  # kind: "image" or "tabular"


@hookimpl
def register_datasets(register) -> None:  # noqa: ANN001
    for loader in (Table, Arrays):
        register(loader)
