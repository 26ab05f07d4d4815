"""The per-run secret: drawn from the OS once per run directory, kept private in it, read back on resume, and the
only key of the challenger's seeds."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from arena.cli import main
from arena.engine.seeds import derive_seed
from arena.pipeline.store import SECRET, SECRET_ENV, RunDirError, RunStore, challenger_seed

HEX = "ab" * 32


def test_a_new_run_directory_gets_a_private_random_secret(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(SECRET_ENV, raising=False)
    a, b = RunStore(tmp_path / "a"), RunStore(tmp_path / "b")
    sa, sb = a.secret(), b.secret()
    assert len(sa) == 32 and sa != sb, "each run directory draws its own 32 bytes"
    path = a.root / SECRET
    assert stat.S_IMODE(path.stat().st_mode) == 0o600, "only the owner reads the secret file"
    assert stat.S_IMODE(a.root.stat().st_mode) == 0o700, "the run directory is the owner's alone"
    assert path.read_text().strip() == sa.hex()
    assert RunStore(a.root).secret() == sa, "a resumed run reads its secret back"
    assert not list(a.root.glob(f"{SECRET}.*.tmp")), "no temporary file is left behind"


def test_the_environment_supplies_the_secret_of_a_new_run(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(SECRET_ENV, HEX)
    assert RunStore(tmp_path / "a").secret() == bytes.fromhex(HEX) == RunStore(tmp_path / "b").secret()


def test_a_different_environment_secret_does_not_replace_a_runs_own(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(SECRET_ENV, raising=False)
    RunStore(tmp_path).secret()
    monkeypatch.setenv(SECRET_ENV, HEX)
    with pytest.raises(RunDirError, match=SECRET_ENV):
        RunStore(tmp_path).secret()


@pytest.mark.parametrize("value", ["", "ab" * 31, "zz" * 32, "ab" * 33, HEX[:-1] + "g"])
def test_a_malformed_environment_secret_is_refused_before_anything_is_written(tmp_path: Path, monkeypatch,
                                                                              value: str) -> None:
    monkeypatch.setenv(SECRET_ENV, value)
    with pytest.raises(RunDirError, match=f"{SECRET_ENV}: a run secret is 64 hexadecimal digits"):
        RunStore(tmp_path / "run").secret()
    assert not (tmp_path / "run").exists()


def test_arena_run_with_a_malformed_secret_exits_2(tiny_scenario: Path, tmp_path: Path, monkeypatch,
                                                   capsys) -> None:
    monkeypatch.setenv(SECRET_ENV, "not-hex")
    assert main(["run", str(tiny_scenario), "--out", str(tmp_path / "run"), "--serial", "--no-report"]) == 2
    assert SECRET_ENV in capsys.readouterr().err
    assert not (tmp_path / "run" / "results.jsonl").exists()


def test_a_damaged_secret_file_is_an_error_naming_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(SECRET_ENV, raising=False)
    (tmp_path / SECRET).write_text("short\n")
    with pytest.raises(RunDirError, match=SECRET):
        RunStore(tmp_path).secret()


def test_challenger_seeds_depend_on_the_secret_and_cannot_be_rebuilt_from_the_scenario_seed() -> None:
    a, b = bytes(32), bytes.fromhex(HEX)
    seeds = {challenger_seed(s, k) for s in (a, b) for k in range(3)}
    assert len(seeds) == 6, "each (secret, scenario seed) has its own challenger seed"
    assert all(0 <= s < 2**63 for s in seeds)
    assert challenger_seed(b, 1) == challenger_seed(bytes.fromhex(HEX), 1), "deterministic"
    assert challenger_seed(b, 1) not in {derive_seed(k) for k in range(1000)}
