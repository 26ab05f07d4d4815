"""Inputs are complete: long names, too many matchups, oversized files, huge integers, sexagesimal-looking values
and too-short image files are refused at validation with exit status 2, and nothing is written."""

from __future__ import annotations

import pickle
import struct
from pathlib import Path

import pytest

from arena.cli import main
from arena.pipeline.scenario import read_yaml
from plugins.datasets import read_cifar_batch, read_idx
from tests.conftest import write_scenario
from tests.pipeline.test_faults import SMALL


def refused(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> str:
    path = write_scenario(tmp_path / "s.yaml", text)
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--serial", "--no-report"]) == 2
    assert not out.exists()
    return capsys.readouterr().err


def test_long_names_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(tmp_path, SMALL.replace("name: small", "name: " + "s" * 300), capsys)
    assert "more than the 64" in err
    err = refused(tmp_path, SMALL.replace("name: syn", "name: " + "t" * 65), capsys)
    assert "tracks[0].name" in err


def test_matchup_cap(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARENA_MAX_MATCHUPS", "2")
    err = refused(tmp_path, SMALL.replace("seeds: [0]", "seeds: [0, 1, 2]"), capsys)
    assert "ARENA_MAX_MATCHUPS" in err and "3 matchups" in err


def test_size_cap_before_parsing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(tmp_path, SMALL + "#" * (9 * 1024 * 1024) + "\n", capsys)
    assert "ARENA_MAX_SCENARIO_BYTES" in err


def test_huge_integer_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(tmp_path, SMALL.replace("seeds: [0]", "seeds: [" + "9" * 5000 + "]"), capsys)
    assert "no field takes one so large" in err


def test_sexagesimal_is_a_string(tmp_path: Path) -> None:
    path = write_scenario(tmp_path / "y.yaml", "a: 1:30\nb: 12\n")
    assert read_yaml(path) == {"a": "1:30", "b": 12}


def test_short_cifar_batch_and_zero_width_mnist(tmp_path: Path) -> None:
    short = tmp_path / "data_batch_1"
    short.write_bytes(pickle.dumps({b"data": b"", b"labels": []})[:14])
    with pytest.raises(ValueError, match="data_batch_1"):
        read_cifar_batch(short)
    idx = tmp_path / "train-images-idx3-ubyte"
    idx.write_bytes(bytes([0, 0, 8, 3]) + struct.pack(">3I", 5, 0, 28))
    with pytest.raises(ValueError, match="zero dimension"):
        read_idx(idx)
