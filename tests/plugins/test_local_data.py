"""The loaders of data people already have, each reading a small file the test writes: tables (CSV, TSV, Parquet),
NumPy arrays (Purchase100 / Texas100 style), an image folder, a saved Hugging Face dataset and CIFAR-100."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from arena.plugins import registries


def load(name: str, **params):
    loader = registries().datasets.get(name)
    return loader().load(loader.Params.model_validate(params))


def test_every_local_loader_is_registered():
    assert {"table", "numpy", "image-folder", "huggingface", "cifar100"} <= set(registries().datasets.names())


# ---- tables ------------------------------------------------------------------------------------------------------

FRAME = pd.DataFrame({"age": [20, 30, 40, 50, 60], "city": ["b", "a", "b", "c", "a"], "zip": [7, 9, 7, 7, 9],
                      "income": [1.0, 3.0, 2.0, 5.0, 3.0], "y": ["yes", "no", "no", "yes", "maybe"]})


def _expected_table() -> np.ndarray:
    """By hand: age and income min-max scaled; city one-hot (a, b, c); zip one-hot when categorical (7, 9)."""
    age = [0, 0.25, 0.5, 0.75, 1]
    income = [0, 0.5, 0.25, 1, 0.5]
    city = [[0, 1, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 0]]
    zip_ = [[1, 0], [0, 1], [1, 0], [1, 0], [0, 1]]
    return np.array([[a, *c, *z, i] for a, c, z, i in zip(age, city, zip_, income)], dtype=np.float32)


@pytest.mark.parametrize("suffix", [".csv", ".tsv"])
def test_a_csv_table_encodes_numbers_scaled_and_categories_one_hot(tmp_path, suffix):
    path = tmp_path / f"people{suffix}"
    FRAME.to_csv(path, index=False, sep="\t" if suffix == ".tsv" else ",")
    ds = load("table", path=str(path), label="y", categorical=["zip"])
    np.testing.assert_allclose(ds.X, _expected_table())
    assert ds.y.tolist() == [2, 1, 1, 2, 0] and ds.n_classes == 3  # maybe, no, yes: sorted
    assert (ds.kind, ds.shape) == ("tabular", (7,))


def test_a_table_keeps_only_the_columns_named_and_the_first_limit_rows(tmp_path):
    path = tmp_path / "people.csv"
    FRAME.to_csv(path, index=False)
    ds = load("table", path=str(path), label="y", columns=["income", "age"], limit=4)
    np.testing.assert_allclose(ds.X, [[0, 0], [0.5, 1 / 3], [0.25, 2 / 3], [1, 1]])
    assert ds.y.tolist() == [1, 0, 0, 1] and ds.n_classes == 2


def test_a_headerless_csv_names_its_columns_by_position(tmp_path):
    """Purchase100 as Shokri et al. distribute it: the class first, then the binary features, no header."""
    path = tmp_path / "dataset_purchase.csv"
    path.write_text("3,0,1,1\n1,1,0,1\n3,1,1,0\n")
    ds = load("table", path=str(path), label="0", header=False)
    np.testing.assert_array_equal(ds.X, [[0, 1, 1], [1, 0, 1], [1, 1, 0]])
    assert ds.y.tolist() == [1, 0, 1] and ds.n_classes == 2


def test_a_parquet_table_reads_as_its_csv_does(tmp_path):
    pytest.importorskip("pyarrow")
    FRAME.to_parquet(tmp_path / "people.parquet")
    FRAME.to_csv(tmp_path / "people.csv", index=False)
    parquet = load("table", path=str(tmp_path / "people.parquet"), label="y", categorical=["zip"])
    csv = load("table", path=str(tmp_path / "people.csv"), label="y", categorical=["zip"])
    np.testing.assert_array_equal(parquet.X, csv.X)
    np.testing.assert_array_equal(parquet.y, csv.y)


def test_parquet_without_pyarrow_is_a_clear_error(tmp_path, monkeypatch):
    path = tmp_path / "people.parquet"
    path.write_bytes(b"PAR1 not really")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ValueError, match=r"^path: .*people.parquet: reading Parquet needs pyarrow, which is not "):
        load("table", path=str(path), label="y")


# ---- NumPy arrays ------------------------------------------------------------------------------------------------

def test_purchase100_style_npz_with_one_hot_labels(tmp_path):
    """Binary features and one-hot labels (as the Purchase100 / Texas100 .npz files hold them): the one-hot
    columns are the classes, even one no record has."""
    rng = np.random.default_rng(0)
    features, ids = rng.integers(0, 2, (40, 12)).astype(np.int8), rng.integers(0, 4, 40)
    np.savez(tmp_path / "purchase.npz", features=features, labels=np.eye(5)[ids])
    ds = load("numpy", path=str(tmp_path / "purchase.npz"))
    assert ds.n_classes == 5 and ds.y.tolist() == ids.tolist()
    np.testing.assert_array_equal(ds.X, features.astype(np.float32))  # already in [0, 1]
    assert (ds.kind, ds.shape) == ("tabular", (12,))


def test_npz_arrays_under_other_names_and_class_values_remapped(tmp_path):
    np.savez_compressed(tmp_path / "texas.npz", X=np.array([[0.0, 10.0], [5.0, 20.0], [10.0, 0.0]]),
                        Y=np.array([7, 3, 7]))
    ds = load("numpy", path=str(tmp_path / "texas.npz"), features="X", labels="Y")
    np.testing.assert_allclose(ds.X, [[0, 0.5], [0.5, 1], [1, 0]])
    assert ds.y.tolist() == [1, 0, 1] and ds.n_classes == 2


def test_npy_images_channels_last_become_records_channels_first(tmp_path):
    images = np.arange(2 * 4 * 4 * 3, dtype=np.uint8).reshape(2, 4, 4, 3)
    np.save(tmp_path / "x.npy", images)
    np.save(tmp_path / "y.npy", np.array(["cat", "dog"]))
    ds = load("numpy", path=str(tmp_path / "x.npy"), labels_path=str(tmp_path / "y.npy"), layout="nhwc")
    assert (ds.kind, ds.shape, ds.y.tolist()) == ("image", (3, 4, 4), [0, 1])
    np.testing.assert_allclose(ds.X[1], images[1].transpose(2, 0, 1).reshape(-1) / 255.0)


# ---- image folder ------------------------------------------------------------------------------------------------

def write_image_folder(root: Path, sizes: dict[str, list[tuple[int, int]]], mode: str = "RGB") -> dict:
    """Class folders of PNG images of the given (width, height); returns {path: pixels} to compare against."""
    from PIL import Image

    rng, written = np.random.default_rng(0), {}
    for name, shapes in sizes.items():
        (root / name / "nested").mkdir(parents=True, exist_ok=True)
        for i, (w, h) in enumerate(shapes):
            pixels = rng.integers(0, 256, (h, w, 3) if mode == "RGB" else (h, w), dtype=np.uint8)
            path = root / name / ("nested" if i % 2 else ".") / f"{i}.png"
            Image.fromarray(pixels).save(path)
            written[path.resolve()] = pixels
    (root / "cat" / "notes.txt").write_text("not an image: ignored, as ImageFolder ignores it")
    return written


def test_an_image_folder_reads_as_imagefolder_does(tmp_path):
    written = write_image_folder(tmp_path / "pets", {"dog": [(5, 4)] * 3, "cat": [(5, 4)] * 2})
    ds = load("image-folder", path=str(tmp_path / "pets"))
    assert ds.y.tolist() == [0, 0, 1, 1, 1] and ds.n_classes == 2  # cat, dog: sorted folder names
    assert (ds.kind, ds.shape) == ("image", (3, 4, 5))
    first = written[(tmp_path / "pets" / "cat" / "0.png").resolve()]
    np.testing.assert_allclose(ds.X[0], first.transpose(2, 0, 1).reshape(-1) / 255.0, rtol=1e-6)


def test_an_image_folder_resized_grey_and_limited_keeps_every_class(tmp_path):
    write_image_folder(tmp_path / "pets", {"cat": [(5, 4), (8, 8), (3, 3)], "dog": [(6, 6)] * 3})
    ds = load("image-folder", path=str(tmp_path / "pets"), size=[4, 4], channels=1, limit=3)
    assert ds.shape == (1, 4, 4) and ds.X.shape == (3, 16)
    assert ds.y.tolist() == [0, 1, 0]  # one of each class in turn
    assert ds.X.min() >= 0.0 and ds.X.max() <= 1.0


# ---- Hugging Face ------------------------------------------------------------------------------------------------

def test_a_saved_hugging_face_table_reads_with_its_class_labels(tmp_path):
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"a": datasets.Value("float32"), "c": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["n", "p", "q"])})
    saved = datasets.Dataset.from_dict({"a": [1.0, 2.0, 3.0], "c": ["x", "y", "x"], "label": [0, 1, 1]},
                                       features=features)
    saved.save_to_disk(str(tmp_path / "hf"))
    ds = load("huggingface", path=str(tmp_path / "hf"))
    np.testing.assert_allclose(ds.X, [[0, 1, 0], [0.5, 0, 1], [1, 1, 0]])
    assert ds.y.tolist() == [0, 1, 1] and ds.n_classes == 3  # the ClassLabel's classes, 'q' unused


def test_a_saved_hugging_face_image_split_reads_as_images(tmp_path):
    datasets = pytest.importorskip("datasets")
    from PIL import Image

    rng = np.random.default_rng(1)
    pixels = [rng.integers(0, 256, (4, 3, 3), dtype=np.uint8) for _ in range(4)]
    split = datasets.Dataset.from_dict({"img": [Image.fromarray(p) for p in pixels], "label": [3, 5, 3, 5]},
                                       features=datasets.Features({"img": datasets.Image(),
                                                                   "label": datasets.Value("int64")}))
    datasets.DatasetDict({"train": split, "test": split}).save_to_disk(str(tmp_path / "hf"))
    ds = load("huggingface", path=str(tmp_path / "hf"), split="test")
    assert (ds.shape, ds.y.tolist(), ds.n_classes) == ((3, 4, 3), [0, 1, 0, 1], 2)
    np.testing.assert_allclose(ds.X[2], pixels[2].transpose(2, 0, 1).reshape(-1) / 255.0, rtol=1e-6)


def test_hugging_face_without_the_datasets_library_is_a_clear_error(tmp_path, monkeypatch):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "state.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ValueError, match="^path: reading a Hugging Face dataset needs the datasets library"):
        load("huggingface", path=str(tmp_path / "hf"))


# ---- CIFAR-100 ---------------------------------------------------------------------------------------------------

def write_cifar100(folder: Path, split: str = "train", n: int = 6) -> np.ndarray:
    folder.mkdir(exist_ok=True)
    data = np.random.default_rng(0).integers(0, 256, (n, 3072), dtype=np.uint8)
    fine, coarse = [i * 17 % 100 for i in range(n)], [i * 3 % 20 for i in range(n)]
    batch = {b"filenames": [b"x.png"] * n, b"batch_label": b"training batch 1 of 1", b"fine_labels": fine,
             b"coarse_labels": coarse, b"data": data}
    (folder / split).write_bytes(pickle.dumps(batch, protocol=2))
    return data


@pytest.mark.parametrize("labels,classes", [("fine", 100), ("coarse", 20)])
def test_cifar100_reads_its_python_files_with_fine_or_coarse_labels(tmp_path, labels, classes):
    data = write_cifar100(tmp_path / "cifar-100-python", "test")
    ds = load("cifar100", path=str(tmp_path / "cifar-100-python"), split="test", labels=labels)
    assert ds.n_classes == classes and ds.shape == (3, 32, 32)
    assert ds.y.tolist() == ([i * 17 % 100 for i in range(6)] if labels == "fine" else [i * 3 % 20 for i in range(6)])
    np.testing.assert_allclose(ds.X, data / 255.0, rtol=1e-6)


@pytest.mark.slow
def test_a_csv_table_plays_a_tournament(tmp_path, capsys):
    import json

    from arena.cli import main
    from tests.conftest import write_scenario
    from tests.pipeline.test_faults import SMALL

    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 4))
    frame = pd.DataFrame(x, columns=list("abcd")).assign(kind=rng.choice(["p", "q", "r"], 300),
                                                         label=np.where(x[:, 0] + x[:, 1] > 0, "hi", "lo"))
    frame.to_csv(tmp_path / "records.csv", index=False)
    text = SMALL.replace("timeout: 10", "timeout: 300").replace(
        "{name: synthetic, n: 300, features: 8}", f"{{name: table, path: '{tmp_path / 'records.csv'}', label: label}}")
    path = write_scenario(tmp_path / "s.yaml", text)
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--serial", "--no-report"]) == 0, capsys.readouterr().err
    (row,) = map(json.loads, (out / "results.jsonl").read_text().splitlines())
    assert row["status"] == "ok" and 0.0 <= row["utility"] <= 1.0 and 0.0 <= row["metrics"]["auc"] <= 1.0, row
