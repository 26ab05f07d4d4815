"""Appending a row costs the same at any length of results.jsonl: the file is never read but for its last byte
and, after a torn write, back to its last newline (``RunStore.append_result``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arena.pipeline.store import RunStore, read_results


def row(n: int) -> dict:
    return {"key": f"k{n}", "status": "ok", "seed": n, "metrics": {"auc": 0.5}}


def test_an_append_reads_nothing_before_the_last_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = RunStore(tmp_path)
    for n in range(200):
        store.append_result(row(n))
    size = store.results_path.stat().st_size
    read: list[int] = []

    class Counting:  # counts the bytes each read of the results file returns
        def __init__(self, f) -> None:
            self.f = f

        def __getattr__(self, name: str):
            return getattr(self.f, name)

        def read(self, n: int = -1) -> bytes:
            data = self.f.read(n)
            read.append(len(data))
            return data

        def __enter__(self) -> Counting:
            return self

        def __exit__(self, *exc: object) -> None:
            self.f.close()

    import arena.pipeline.store as module

    real_fdopen = module.os.fdopen
    monkeypatch.setattr(module.os, "fdopen", lambda fd, *a, **k: Counting(real_fdopen(fd, *a, **k)))
    store.append_result(row(200))
    assert sum(read) == 1 and size > 1000  # the last byte of a file of 200 rows
    monkeypatch.undo()
    assert [r["key"] for r in read_results(store.results_path).rows] == [f"k{n}" for n in range(201)]


@pytest.mark.parametrize("torn", [10, 70_000], ids=["short", "longer-than-a-block"])
def test_a_torn_tail_is_cut_back_to_the_last_newline(tmp_path: Path, torn: int) -> None:
    store = RunStore(tmp_path)
    store.append_result(row(0))
    with open(store.results_path, "ab") as f:
        f.write(b'{"key": "half' + b"x" * torn)  # a kill during a write
    store.append_result(row(1))
    lines = store.results_path.read_bytes().split(b"\n")
    assert [json.loads(x)["key"] for x in lines if x] == ["k0", "k1"]


def test_a_file_that_is_all_torn_tail_starts_again_from_nothing(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    tmp_path.mkdir(exist_ok=True)
    store.results_path.write_bytes(b'{"key": "k9", "sta')
    store.append_result(row(1))
    assert [r["key"] for r in read_results(store.results_path).rows] == ["k1"]
