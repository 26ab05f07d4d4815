"""Corrupt, mistyped and oversized files for the local data loaders (tables, NumPy arrays, image folders, saved
Hugging Face datasets, CIFAR-100): exit status 2 naming the file and the field, no traceback, nothing written."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import write_scenario
from tests.pipeline.test_faults import SMALL
from tests.pipeline.test_hostile_input import Evil, _not_regular, _run_refused
from tests.plugins.test_local_data import FRAME, write_cifar100, write_image_folder


def scenario(tmp_path: Path, dataset: str) -> Path:
    return write_scenario(tmp_path / "data.yaml", SMALL.replace("{name: synthetic, n: 300, features: 8}", dataset))


def refused(tmp_path, capsys, dataset: str, field: str, path: Path, expected: str) -> str:
    err = _run_refused(scenario(tmp_path, dataset), tmp_path / "run", capsys, expected)
    assert f"tracks[0].dataset.{field}: {path}" in err, err
    return err


# ---- tables ------------------------------------------------------------------------------------------------------

CSV_CASES = [
    ("no such label column", FRAME.to_csv(index=False), "label: target", "label", "no column 'target'"),
    ("a missing cell", FRAME.to_csv(index=False).replace("30,", ",", 1), "label: y", "path",
     "column 'age' has 1 missing value(s), the first in data row 2"),
    ("infinity", FRAME.to_csv(index=False).replace("3.0", "inf", 1), "label: y", "path", "column 'income' holds "
     "infinity"),
    ("one class", FRAME.assign(y="same").to_csv(index=False), "label: y", "label", "labels take 1 value(s)"),
    ("an unknown feature", FRAME.to_csv(index=False), "label: y, columns: [agee]", "columns", "no column(s) 'agee'"),
    ("the label as a feature", FRAME.to_csv(index=False), "label: y, columns: [y]", "columns",
     "the label column cannot be a feature"),
    ("a ragged row", FRAME.to_csv(index=False) + "1,2,3,4,5,6,7\n", "label: y", "path", "not a readable table"),
    ("not text", "\x00\xff\xfe garbage", "label: y", "path", "not a readable table"),
    ("too many categories", pd.DataFrame({"id": [f"u{i}" for i in range(1001)], "y": [0, 1] * 500 + [0]}).to_csv(
        index=False), "label: y", "categorical", "column 'id' has 1001 distinct values"),
]


@pytest.mark.parametrize("what,text,options,field,expected", CSV_CASES, ids=[c[0] for c in CSV_CASES])
def test_bad_csv_tables_are_refused(tmp_path, capsys, what, text, options, field, expected):
    path = tmp_path / "table.csv"
    path.write_bytes(text.encode("latin-1") if what == "not text" else text.encode())
    refused(tmp_path, capsys, f"{{name: table, path: '{path}', {options}}}", field, path, expected)


def test_a_compressed_or_unknown_table_is_refused(tmp_path, capsys):
    path = tmp_path / "table.csv.gz"
    path.write_bytes(b"\x1f\x8b whatever")
    refused(tmp_path, capsys, f"{{name: table, path: '{path}', label: y}}", "path", path,
            "not a .csv, .tsv or .parquet file")


def test_a_corrupt_parquet_file_is_refused(tmp_path, capsys):
    pytest.importorskip("pyarrow")
    path = tmp_path / "table.parquet"
    FRAME.to_parquet(path)
    path.write_bytes(path.read_bytes()[: 40])
    refused(tmp_path, capsys, f"{{name: table, path: '{path}', label: y}}", "path", path, "not a readable table")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory"])
def test_a_table_that_is_not_a_regular_file_is_refused_without_hanging(tmp_path, capsys, kind):
    path = tmp_path / "table.csv"
    _not_regular(path, kind)
    refused(tmp_path, capsys, f"{{name: table, path: '{path}', label: y}}", "path", path, "not a regular file")


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path, capsys, monkeypatch):
    import arena_plugins.datasets

    monkeypatch.setattr(arena_plugins.datasets, "MAX_FILE_BYTES", 50)
    path = tmp_path / "table.csv"
    FRAME.to_csv(path, index=False)
    refused(tmp_path, capsys, f"{{name: table, path: '{path}', label: y}}", "path", path,
            "bytes, more than the 50 a data file may have")


# ---- NumPy arrays ------------------------------------------------------------------------------------------------

def _npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


GOOD = dict(features=np.zeros((6, 3), dtype=np.float32), labels=np.array([0, 1] * 3))
NPZ_CASES = [
    ("not a zip", b"PK not really a zip", "features", "corrupt or truncated"),
    ("truncated", _npz(**GOOD)[:-30], "features", "corrupt or truncated"),
    ("pickled objects", _npz(features=np.array([Evil()] * 6, dtype=object), labels=GOOD["labels"]), "features",
     "arrays of object are not read"),
    ("no labels array", _npz(features=GOOD["features"]), "labels", "no array 'labels' (arrays: features)"),
    ("a label per record missing", _npz(features=GOOD["features"], labels=np.array([0, 1])), "labels",
     "shape (2,) for 6 records"),
    ("NaN features", _npz(features=np.full((6, 3), np.nan), labels=GOOD["labels"]), "features",
     "features include NaN or infinity"),
    ("labels not one-hot", _npz(features=GOOD["features"], labels=np.ones((6, 3))), "labels", "must be one-hot rows"),
    ("fractional labels", _npz(features=GOOD["features"], labels=np.linspace(0, 1, 6)), "labels",
     "labels are fractional numbers"),
    ("complex features", _npz(features=np.zeros((6, 3), dtype=complex), labels=GOOD["labels"]), "features",
     "arrays of complex128 are not read"),
    ("5-D features", _npz(features=np.zeros((6, 1, 1, 1, 1)), labels=GOOD["labels"]), "layout",
     "do not fit layout unset"),
]


@pytest.mark.parametrize("what,content,field,expected", NPZ_CASES, ids=[c[0] for c in NPZ_CASES])
def test_bad_npz_archives_are_refused(tmp_path, capsys, what, content, field, expected):
    path = tmp_path / "arrays.npz"
    path.write_bytes(content)
    refused(tmp_path, capsys, f"{{name: numpy, path: '{path}'}}", field, path, expected)
    assert not Path("/tmp/arena-pwned").exists()


def test_an_npz_member_that_decompresses_past_the_limit_is_refused_unread(tmp_path, capsys, monkeypatch):
    import arena_plugins.tables

    monkeypatch.setattr(arena_plugins.tables, "MAX_FILE_BYTES", 10_000)
    path = tmp_path / "bomb.npz"
    np.savez_compressed(path, features=np.zeros((1000, 100)), labels=np.arange(1000) % 2)
    assert path.stat().st_size < 10_000
    refused(tmp_path, capsys, f"{{name: numpy, path: '{path}'}}", "features", path, "bytes uncompressed, more than "
            "the 10000")


def test_a_truncated_npy_is_refused_from_its_header(tmp_path, capsys):
    path, labels = tmp_path / "x.npy", tmp_path / "y.npy"
    np.save(path, np.zeros((100, 10)))
    path.write_bytes(path.read_bytes()[:-800])
    np.save(labels, np.arange(100) % 2)
    refused(tmp_path, capsys, f"{{name: numpy, path: '{path}', labels_path: '{labels}'}}", "path", path,
            "header promises (100, 10) of float64 but the file is")


# ---- image folders -----------------------------------------------------------------------------------------------

def test_a_corrupt_image_is_refused_naming_it(tmp_path, capsys):
    write_image_folder(tmp_path / "pets", {"cat": [(4, 4)] * 2, "dog": [(4, 4)] * 2})
    bad = tmp_path / "pets" / "dog" / "0.png"
    bad.write_bytes(bad.read_bytes()[:60])
    err = _run_refused(scenario(tmp_path, f"{{name: image-folder, path: '{tmp_path / 'pets'}'}}"), tmp_path / "run",
                       capsys, "corrupt or truncated image")
    assert f"tracks[0].dataset.path: {bad}" in err


def test_a_file_that_is_no_image_is_refused_naming_it(tmp_path, capsys):
    write_image_folder(tmp_path / "pets", {"cat": [(4, 4)] * 2, "dog": [(4, 4)] * 2})
    bad = tmp_path / "pets" / "cat" / "fake.jpg"
    bad.write_text("not a jpeg")
    refused(tmp_path, capsys, f"{{name: image-folder, path: '{tmp_path / 'pets'}'}}", "path", bad,
            "not a readable image")


def test_images_of_mixed_sizes_need_a_size(tmp_path, capsys):
    write_image_folder(tmp_path / "pets", {"cat": [(4, 4), (5, 4)], "dog": [(4, 4)]})
    refused(tmp_path, capsys, f"{{name: image-folder, path: '{tmp_path / 'pets'}'}}", "path",
            tmp_path / "pets" / "cat" / "nested" / "1.png", "give size: [height, width]")


def test_an_image_past_the_pixel_limit_is_refused_before_it_is_decoded(tmp_path, capsys, monkeypatch):
    import arena_plugins.images

    monkeypatch.setattr(arena_plugins.images, "MAX_PIXELS", 15)
    write_image_folder(tmp_path / "pets", {"cat": [(4, 4)], "dog": [(4, 4)]})
    refused(tmp_path, capsys, f"{{name: image-folder, path: '{tmp_path / 'pets'}'}}", "path",
            tmp_path / "pets" / "cat" / "0.png", "4 x 4 pixels, more than the 15 an image may have")


def test_a_folder_without_class_folders_is_refused(tmp_path, capsys):
    (tmp_path / "flat").mkdir()
    refused(tmp_path, capsys, f"{{name: image-folder, path: '{tmp_path / 'flat'}'}}", "path", tmp_path / "flat",
            "0 class folder(s)")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_an_image_that_is_not_a_regular_file_is_refused_without_hanging(tmp_path, capsys, kind):
    write_image_folder(tmp_path / "pets", {"cat": [(4, 4)], "dog": [(4, 4)]})
    target = tmp_path / "pets" / "dog" / "0.png"
    target.unlink()
    _not_regular(target, kind)
    refused(tmp_path, capsys, f"{{name: image-folder, path: '{tmp_path / 'pets'}'}}", "path", target,
            "not a regular file")


# ---- Hugging Face and CIFAR-100 -------------------------------------------------------------------------------

def test_a_damaged_saved_hugging_face_dataset_is_refused(tmp_path, capsys):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"a": [1.0, 2.0], "label": [0, 1]}).save_to_disk(str(tmp_path / "hf"))
    (arrow,) = (tmp_path / "hf").glob("*.arrow")
    arrow.write_bytes(b"not arrow at all")
    refused(tmp_path, capsys, f"{{name: huggingface, path: '{tmp_path / 'hf'}'}}", "path", tmp_path / "hf",
            "not a readable saved dataset")


def test_a_folder_not_saved_by_save_to_disk_is_refused(tmp_path, capsys):
    (tmp_path / "hf").mkdir()
    refused(tmp_path, capsys, f"{{name: huggingface, path: '{tmp_path / 'hf'}'}}", "path", tmp_path / "hf",
            "not saved by save_to_disk")


CIFAR100_CASES = [
    ("malicious pickle", pickle.dumps({b"data": Evil(), b"fine_labels": [0]}), "refusing to load posix.system"),
    ("fine labels past 99", pickle.dumps({b"data": np.zeros((2, 3072), dtype=np.uint8), b"fine_labels": [0, 100]}),
     "fine_labels 0-99"),
    ("no fine labels", pickle.dumps({b"data": np.zeros((2, 3072), dtype=np.uint8), b"labels": [0, 1]}),
     "CIFAR-100 batch without data or fine_labels"),
    ("truncated", pickle.dumps({b"data": np.zeros((2, 3072), dtype=np.uint8), b"fine_labels": [0, 1]})[:100],
     "corrupt or truncated"),
]


@pytest.mark.parametrize("what,content,expected", CIFAR100_CASES, ids=[c[0] for c in CIFAR100_CASES])
def test_bad_cifar100_files_are_refused(tmp_path, capsys, what, content, expected):
    folder = tmp_path / "cifar-100-python"
    write_cifar100(folder)
    (folder / "train").write_bytes(content)
    refused(tmp_path, capsys, f"{{name: cifar100, path: '{folder}'}}", "path", folder / "train", expected)
    assert not Path("/tmp/arena-pwned").exists()


def test_saved_arrow_files_past_the_limit_are_refused_before_the_library_opens_them(tmp_path, capsys, monkeypatch):
    import arena_plugins.hf

    monkeypatch.setattr(arena_plugins.hf, "MAX_FILE_BYTES", 100)
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "state.json").write_text("{}")
    for i in range(2):
        (tmp_path / "hf" / f"data-0000{i}-of-00002.arrow").write_bytes(b"\0" * 60)
    refused(tmp_path, capsys, f"{{name: huggingface, path: '{tmp_path / 'hf'}'}}", "path", tmp_path / "hf",
            "120 bytes of Arrow files, more than the 100")


def test_a_parquet_file_past_the_limit_uncompressed_is_refused_from_its_metadata(tmp_path, capsys, monkeypatch):
    pytest.importorskip("pyarrow")
    import arena_plugins.tables

    path = tmp_path / "zeros.parquet"
    pd.DataFrame({"x": np.zeros(20_000), "y": np.arange(20_000) % 2}).to_parquet(path)
    monkeypatch.setattr(arena_plugins.tables, "MAX_FILE_BYTES", path.stat().st_size * 4)
    refused(tmp_path, capsys, f"{{name: table, path: '{path}', label: y}}", "path", path, "bytes uncompressed")
