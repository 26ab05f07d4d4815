"""Every scenario shipped in scenarios/ validates; the CIFAR-10 one, whose data is not in the repository, runs end
to end on a tiny synthetic stand-in of the same format with its structure kept and its sizes shrunk."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from arena.pipeline.store import RunStore

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
CIFAR = SCENARIOS / "cifar10-wrn.yaml"


def arena(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "arena.cli", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("path", sorted(p for p in SCENARIOS.glob("*.yaml") if p != CIFAR), ids=lambda p: p.name)
def test_shipped_scenario_validates(path: Path, capsys) -> None:
    from arena.cli import main

    # in this process (the command's code is the same; ``python -m arena.cli`` itself is run below)
    status = main(["validate", str(path)])
    out = capsys.readouterr()
    assert status == 0, out.out + out.err


def _fake_cifar(folder: Path, n_train: int, n_test: int) -> None:
    """CIFAR-10 python batches as ``read_cifar_batch`` reads them: uint8 [n, 3072] under b"data", b"labels"."""
    folder.mkdir()
    g = np.random.default_rng(0)
    for name, n in (("data_batch_1", n_train), ("test_batch", n_test)):
        labels = [i % 10 for i in range(n)]
        data = g.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        data[:, :1024] //= 2
        data[:, :1024] += (np.array(labels, dtype=np.uint8) * 12)[:, None]  # a learnable signal per class
        with open(folder / name, "wb") as f:
            pickle.dump({b"data": data, b"labels": labels}, f)


@pytest.mark.subprocess
def test_cifar10_scenario_runs_on_a_tiny_synthetic_stand_in(tmp_path: Path) -> None:
    spec = yaml.safe_load(CIFAR.read_text())
    assert [t["dataset"]["name"] for t in spec["tracks"]] == ["cifar10"]
    _fake_cifar(tmp_path / "cifar", n_train=200, n_test=20)
    track = spec["tracks"][0]
    shipped = (track["model"]["name"], track["device"], track["training"]["augment"],
               [d["name"] for d in track["defenses"]], [(a["name"], a.get("variant")) for a in track["attacks"]])
    assert shipped[0] == "wrn" and shipped[1] == "auto" and shipped[2] == {"crop": 4, "flip": True}
    assert {"nonprivate", "dpsgd"} <= set(shipped[3])
    assert ("lira", None) in shipped[4] and ("lira", "offline") in shipped[4]
    assert all(a["shadows"] >= 64 and a.get("mirror") and a.get("shift") for a in track["attacks"]
               if a["name"] == "lira")

    spec["seeds"] = spec["seeds"][:1]
    track["dataset"]["path"] = str(tmp_path / "cifar")
    track["model"].update(depth=10, width=1, groups=4)
    track["training"].update(epochs=1, batch_size=16)
    track["game"].update(members=16, test=16, population=32)
    track["pool_chunk"] = 2
    for defense in track["defenses"]:
        if "training" in defense:
            defense["training"].update(epochs=1, batch_size=16)
    for attack in track["attacks"]:
        if "shadows" in attack:
            attack["shadows"] = 4
    small = tmp_path / "cifar-small.yaml"
    small.write_text(yaml.safe_dump(spec, sort_keys=False))

    out = arena("run", str(small), "--out", str(tmp_path / "run"), "--serial", "--no-report")  # reports: tests/results
    assert out.returncode == 0, out.stdout + out.stderr
    rows = RunStore(tmp_path / "run").results()
    n_configs = sum(len(d.get("epsilons", [None])) for d in track["defenses"])
    assert len(rows) == n_configs * len(track["attacks"])
    assert all(r["status"] == "ok" for r in rows), [r for r in rows if r["status"] != "ok"]
