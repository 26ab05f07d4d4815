"""A Hugging Face dataset saved with ``save_to_disk`` (a ``Dataset``, or a ``DatasetDict`` of splits), read with
the ``datasets`` library, imported only when a scenario names one (``pip install 'privacy-arena[data]'``). Local
only: ``load_from_disk`` never downloads. Before it is opened, the folder's Arrow files are checked for size;
before any record is converted, the columns for type: one image column (decoded as an image folder's images are),
or numeric and string columns (encoded as a table's are).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, PositiveInt

from arena import Dataset, DatasetLoader, hookimpl
from arena_plugins.datasets import MAX_FILE_BYTES, _Params, regular_file
from arena_plugins.images import decode
from arena_plugins.tables import class_ids, encode_frame


def _datasets() -> Any:
    try:
        import datasets
    except ImportError:
        raise ValueError("path: reading a Hugging Face dataset needs the datasets library, which is not installed "
                         "(pip install datasets, or 'privacy-arena[data]')") from None
    return datasets


def check_saved(root: Path) -> None:
    """A ``save_to_disk`` folder (``state.json`` or ``dataset_dict.json``) whose Arrow files, regular and all
    together, are within the data-file limit."""
    if not root.is_dir():
        raise ValueError(f"path: {root} is not a directory")
    if not (root / "state.json").exists() and not (root / "dataset_dict.json").exists():
        raise ValueError(f"path: {root}: not saved by save_to_disk (no state.json or dataset_dict.json)")
    total = sum(regular_file(p).stat().st_size for p in root.rglob("*.arrow"))
    if total > MAX_FILE_BYTES:
        raise ValueError(f"path: {root}: {total} bytes of Arrow files, more than the {MAX_FILE_BYTES} a data set may "
                         "have")


class HuggingFaceParams(_Params):
    path: Path = Field(strict=False, description="the folder save_to_disk wrote")
    split: str = Field(default="train", description="the split of a saved DatasetDict")
    label: str = Field(default="label", min_length=1, description="the label column")
    columns: list[str] | None = Field(default=None, min_length=1, description="feature columns (default: all others)")
    categorical: list[str] = Field(default_factory=list, description="numeric columns to one-hot encode too")
    size: list[PositiveInt] | None = Field(default=None, min_length=2, max_length=2,
                                           description="[height, width] to resize images to (default: all one size)")
    channels: Literal[1, 3] = Field(default=3, description="images: 1 grey-scale, 3 RGB")
    limit: PositiveInt | None = None


class HuggingFace(DatasetLoader):
    """A dataset saved with ``datasets``' ``save_to_disk``: an image column, or numeric and string columns, and a
    label column (a ClassLabel keeps its classes; other labels' distinct values become the classes)."""

    name = "huggingface"
    Params = HuggingFaceParams

    def load(self, params: HuggingFaceParams) -> Dataset:  # type: ignore[override]  # narrowed: the loader's own Params (plugin contract)
        root = params.path
        check_saved(root)
        lib = _datasets()
        try:
            ds = lib.load_from_disk(str(root))
        except Exception as exc:  # noqa: BLE001 - damaged metadata or Arrow files raise the library's own errors
            raise ValueError(f"path: {root}: not a readable saved dataset ({type(exc).__name__}: {exc})") from None
        if isinstance(ds, lib.DatasetDict):
            if params.split not in ds:
                raise ValueError(f"split: {root} has splits {', '.join(sorted(ds))}, not {params.split!r}")
            ds = ds[params.split]
        ds = ds.select(range(min(len(ds), params.limit or len(ds))))
        features = dict(ds.features)
        if params.label not in features:
            raise ValueError(f"label: {root}: no column {params.label!r} (columns: {', '.join(features)})")
        names = [c for c in features if c != params.label] if params.columns is None else params.columns
        kinds = {c: type(features[c]).__name__ for c in names if c in features}
        if [c for c, k in kinds.items() if k == "Image"]:
            return self._images(ds, names, kinds, params)
        odd = [f"{c} ({k})" for c, k in kinds.items() if k != "Value"]
        if odd:
            raise ValueError(f"columns: {root}: columns of types other than numbers and strings are not read: "
                             f"{', '.join(odd)}; choose columns")
        frame = ds.select_columns([*kinds, params.label]).to_pandas()
        X, y, n_classes = encode_frame(frame, params.label, params.columns, params.categorical, root, None)
        y, n_classes = _declared(features[params.label], y, n_classes, frame[params.label].to_numpy(), root)
        return Dataset("huggingface", X, y, n_classes, "tabular", (X.shape[1],))

    def _images(self, ds: Any, names: list[str], kinds: dict[str, str], params: HuggingFaceParams) -> Dataset:
        if len(names) != 1 or kinds.get(names[0]) != "Image":
            raise ValueError(f"columns: {params.path}: an image column must be the only feature column, not "
                             f"{', '.join(names)}")
        column = names[0]
        raw = ds.cast_column(column, type(ds.features[column])(decode=False))
        labels = np.asarray(ds[params.label])
        y, n_classes = class_ids(labels, "label", params.path)
        y, n_classes = _declared(ds.features[params.label], y, n_classes, labels, params.path)
        images = ((f"{params.path} [{column}, row {i}]", _image_source(record[column]))
                  for i, record in enumerate(raw))
        X, shape = decode(images, len(y), params.size, params.channels, params.path)
        return Dataset("huggingface", X, y, n_classes, "image", shape)


def _image_source(cell: dict[str, Any]) -> Any:
    """An undecoded image cell ({bytes, path}) as what Pillow opens: its bytes, else its file."""
    import io

    if cell.get("bytes"):
        return io.BytesIO(cell["bytes"])
    if cell.get("path"):
        return regular_file(Path(cell["path"]))
    raise ValueError("path: an image cell holds neither bytes nor a path")


def _declared(feature: Any, y: np.ndarray, n_classes: int, labels: np.ndarray, root: Path) -> tuple[np.ndarray, int]:
    """A ClassLabel's own ids and class count (classes absent from the split still count); other labels keep
    ``y`` and ``n_classes``, the sorted distinct values."""
    if type(feature).__name__ != "ClassLabel":
        return y, n_classes
    ids = labels.astype(np.int64)
    if ids.min() < 0 or ids.max() >= feature.num_classes:
        raise ValueError(f"label: {root}: ids outside the ClassLabel's {feature.num_classes} classes")
    return ids, int(feature.num_classes)


@hookimpl
def register_datasets(register) -> None:  # noqa: ANN001
    register(HuggingFace)
