"""``arena kernels build`` builds every kernel the engine loads, ``status`` says which are built, and without a
compiler the build says what is missing and fails (the arena then runs in pure PyTorch)."""

import io
import sys
from pathlib import Path

import pytest

from arena.cli import main
from arena.engine import conv_forward, conv_kernel, conv_sum, dense_kernel, kernels, native, rng_kernel


@pytest.fixture
def empty_folder(monkeypatch, tmp_path):
    monkeypatch.setenv(native.FOLDER, str(tmp_path / "kernels"))
    monkeypatch.delenv(native.SWITCH, raising=False)
    return tmp_path / "kernels"


def test_the_set_is_every_kernel_the_engine_loads():
    modules = {m.__name__ for m in (conv_kernel, conv_sum, conv_forward, dense_kernel, rng_kernel)}
    assert set(kernels.KERNELS.values()) == modules
    for name, module in kernels.KERNELS.items():
        assert f'native.load("{name}", SOURCE, _bind)' in Path(sys.modules[module].__file__).read_text()


@pytest.mark.slow
def test_build_builds_all_and_status_then_says_so(empty_folder, monkeypatch):
    out = io.StringIO()
    assert kernels.status(out) == 1 and out.getvalue().count("missing") == len(kernels.KERNELS)
    out = io.StringIO()
    assert kernels.build(out) == 0
    assert len(list(empty_folder.glob("*.so"))) == len(kernels.KERNELS)
    out = io.StringIO()
    assert kernels.status(out) == 0 and out.getvalue().count(": built") == len(kernels.KERNELS)
    monkeypatch.setenv(native.SWITCH, "on")
    for module in (conv_kernel, conv_sum, conv_forward, dense_kernel, rng_kernel):
        assert module.library.__wrapped__() is not None


def test_without_a_compiler_build_fails_naming_each_kernel(empty_folder, monkeypatch):
    monkeypatch.setenv("CC", "no-such-compiler")
    out = io.StringIO()
    assert kernels.build(out) == 1
    lines = out.getvalue().splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == list(kernels.KERNELS)
    assert all("no C compiler" in line for line in lines[:-1])
    assert lines[-1].startswith("5 of 5 kernels not built: training on the CPU runs in pure PyTorch")
    assert not empty_folder.exists() or not any(empty_folder.iterdir())


def test_the_command_reports_and_refuses_a_bad_switch(empty_folder, monkeypatch, capsys):
    assert main(["kernels"]) == 1
    assert "ARENA_KERNELS=auto" in capsys.readouterr().out
    monkeypatch.setenv(native.SWITCH, "maybe")
    assert main(["kernels", "status"]) == 2
    assert "ARENA_KERNELS='maybe'" in capsys.readouterr().err
    assert kernels.main(["clean"]) == 2
