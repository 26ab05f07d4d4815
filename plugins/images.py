"""An image folder in torchvision's ``ImageFolder`` layout (``root/<class>/**/<image>``, classes the sorted folder
names), read with Pillow: no torchvision needed. Every file is checked before any is decoded: a regular file of
sane size, an image whose header gives at most ``MAX_PIXELS`` pixels (a decompression bomb), all of one size
(or ``size`` given), and all of them together within memory.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, PositiveInt

from arena import Dataset, DatasetLoader, hookimpl
from arena_plugins.datasets import _Params, regular_file
from arena_plugins.tables import check_memory

EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"})
"""The files ImageFolder reads (torchvision's IMG_EXTENSIONS); other files in the folders are ignored."""
MAX_PIXELS = 1 << 26
"""Pixels one image may have (67 million: 8192 × 8192), read from its header before it is decoded; below
Pillow's own decompression-bomb limit."""


def pillow() -> Any:
    """Pillow's ``Image`` module (installed with matplotlib, a dependency), imported when images are read."""
    try:
        from PIL import Image
    except ImportError:
        raise ValueError("path: reading images needs Pillow, which is not installed (pip install pillow)") from None
    return Image


def open_image(image: Any, where: str) -> Any:
    """An opened (not yet decoded) Pillow image, its pixel count checked from its header."""
    try:
        img = pillow().open(image)
    except Exception as exc:  # noqa: BLE001 - Pillow raises many kinds of error on a damaged file
        raise ValueError(f"{where}: not a readable image ({type(exc).__name__}: {exc})") from None
    if img.width * img.height > MAX_PIXELS:
        raise ValueError(f"{where}: {img.width} x {img.height} pixels, more than the {MAX_PIXELS} an image may have")
    return img


def decode(images: Iterable[tuple[str, Any]], n: int, size: list[int] | None, channels: Literal[1, 3],
           where: Path) -> tuple[np.ndarray, tuple[int, int, int]]:
    """Images (with the name each error gives) as flat [n, channels·h·w] values in [0, 1] and one record's shape:
    converted to grey or RGB, resized to ``size`` [h, w] when given, else all of the first one's size."""
    out: np.ndarray | None = None
    shape: tuple[int, int] | None = tuple(size) if size else None  # type: ignore[assignment]  # two ints
    for i, (name, image) in enumerate(images):
        img = open_image(image, f"path: {name}")
        if shape is None:
            shape = (img.height, img.width)
        try:
            if size is not None and (img.height, img.width) != shape:
                img = img.resize((shape[1], shape[0]), pillow().Resampling.BILINEAR)
            pixels = np.asarray(img.convert("L" if channels == 1 else "RGB"), dtype=np.uint8)
        except Exception as exc:  # noqa: BLE001 - truncated or damaged data shows only when decoded
            raise ValueError(f"path: {name}: corrupt or truncated image ({type(exc).__name__}: {exc})") from None
        finally:
            with contextlib.suppress(Exception):
                img.close()
        if pixels.shape[:2] != shape:
            raise ValueError(f"path: {name}: {pixels.shape[1]} x {pixels.shape[0]} pixels, but the first image is "
                             f"{shape[1]} x {shape[0]}: give size: [height, width] to resize them all")
        if out is None:
            check_memory("path", where, n, channels * math.prod(shape))
            out = np.empty((n, channels * math.prod(shape)), dtype=np.float32)
        out[i] = (pixels.reshape(*shape, channels).transpose(2, 0, 1).reshape(-1) / 255.0)
    if out is None or shape is None:
        raise ValueError(f"path: {where}: no images")
    return out, (channels, *shape)


def image_files(root: Path) -> tuple[list[str], list[tuple[Path, int]]]:
    """(class names, (file, class id) pairs) of an ImageFolder tree; each file checked to be regular and sane."""
    if not root.is_dir():
        raise ValueError(f"path: {root} is not a directory")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    if len(classes) < 2:
        raise ValueError(f"path: {root}: {len(classes)} class folder(s); ImageFolder's layout is one folder per "
                         "class (at least 2), the images inside")
    files = []
    for label, name in enumerate(classes):
        found = sorted(p for p in (root / name).rglob("*") if p.suffix.lower() in EXTENSIONS)
        if not found:
            raise ValueError(f"path: {root / name}: no images ({', '.join(sorted(EXTENSIONS))})")
        files += [(regular_file(p), label) for p in found]
    return classes, files


def interleaved(files: list[tuple[Path, int]], limit: int | None) -> list[tuple[Path, int]]:
    """The first ``limit`` files taking one of each class in turn (every class represented), else all in order."""
    if limit is None or limit >= len(files):
        return files
    by_class: dict[int, list[tuple[Path, int]]] = {}
    for f in files:
        by_class.setdefault(f[1], []).append(f)
    order = sorted(((i, label) for label, fs in by_class.items() for i in range(len(fs))))
    return [by_class[label][i] for i, label in order[:limit]]


class ImageFolderParams(_Params):
    path: Path = Field(strict=False, description="the root: one folder per class, the images inside")
    size: list[PositiveInt] | None = Field(default=None, min_length=2, max_length=2,
                                           description="[height, width] to resize to (default: all one size)")
    channels: Literal[1, 3] = Field(default=3, description="1: grey-scale, 3: RGB")
    limit: PositiveInt | None = None


class ImageFolder(DatasetLoader):
    """Images in class folders (torchvision's ImageFolder layout), as grey-scale or RGB records in [0, 1]."""

    name = "image-folder"
    Params = ImageFolderParams

    def load(self, params: ImageFolderParams) -> Dataset:  # type: ignore[override]  # narrowed: the loader's own Params (plugin contract)
        if params.size and math.prod(params.size) > MAX_PIXELS:
            raise ValueError(f"size: {params.size}: more than the {MAX_PIXELS} pixels an image may have")
        classes, files = image_files(params.path)
        files = interleaved(files, params.limit)
        X, shape = decode(((str(p), p) for p, _ in files), len(files), params.size, params.channels, params.path)
        y = np.array([label for _, label in files], dtype=np.int64)
        return Dataset("image-folder", X, y, len(classes), "image", shape)


@hookimpl
def register_datasets(register) -> None:  # noqa: ANN001
    register(ImageFolder)
