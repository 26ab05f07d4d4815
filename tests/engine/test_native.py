"""The compiled kernels are built only when asked (``native.build``), loaded only from their folder, and missing
ones leave one notice per process (``auto``), nothing (``off``) or an error naming the fix (``on``)."""

import logging
import subprocess

import pytest

from arena.engine import dense_kernel, native


@pytest.fixture
def empty_folder(monkeypatch, tmp_path):
    """A kernels folder with nothing built, a fresh process's notice state and the switch unset."""
    monkeypatch.setenv(native.FOLDER, str(tmp_path / "kernels"))
    monkeypatch.delenv(native.SWITCH, raising=False)
    monkeypatch.setattr(native, "_noticed", False)
    return tmp_path / "kernels"


def _load():
    return native.load("dense", dense_kernel.SOURCE, dense_kernel._bind)


def test_a_missing_kernel_is_never_compiled_and_is_noticed_once(empty_folder, caplog):
    with caplog.at_level(logging.WARNING, logger=native.__name__):
        assert _load() is None
        assert native.load("rng", "/* another kernel */", lambda lib: lib) is None
    assert [r.getMessage() for r in caplog.records] == [native.NOTICE]
    assert "\n" not in native.NOTICE and "ARENA_KERNELS=off" in native.NOTICE and "arena kernels build" in native.NOTICE
    assert not empty_folder.exists()  # nothing built at run time


@pytest.mark.parametrize("off", ["off", "0", " OFF "])
def test_off_loads_nothing_and_says_nothing(empty_folder, monkeypatch, caplog, off):
    native.build("dense", dense_kernel.SOURCE)
    monkeypatch.setenv(native.SWITCH, off)
    with caplog.at_level(logging.WARNING, logger=native.__name__):
        assert _load() is None
    assert not caplog.records


@pytest.mark.parametrize("on", ["on", "1"])
def test_on_requires_the_kernel(empty_folder, monkeypatch, on):
    monkeypatch.setenv(native.SWITCH, on)
    with pytest.raises(RuntimeError, match=r"ARENA_KERNELS=on but kernel 'dense' is not built.*arena kernels build"):
        _load()
    native.build("dense", dense_kernel.SOURCE)
    assert _load() is not None


def test_another_switch_value_is_an_error_naming_the_variable(monkeypatch):
    monkeypatch.setenv(native.SWITCH, "fast")
    with pytest.raises(ValueError, match=r"ARENA_KERNELS='fast': expected auto, off or on"):
        native.mode()


def test_a_built_kernel_loads_without_a_compiler_and_is_built_once(empty_folder, monkeypatch, caplog):
    target = native.build("dense", dense_kernel.SOURCE)
    assert target.parent == empty_folder and target.name.startswith("dense-") and target.suffix == ".so"
    built_at = target.stat().st_mtime_ns
    monkeypatch.setenv("CC", str(empty_folder / "no-such-compiler"))
    assert native.build("dense", dense_kernel.SOURCE) == target and target.stat().st_mtime_ns == built_at
    with caplog.at_level(logging.WARNING, logger=native.__name__):
        lib = _load()
    assert lib is not None and hasattr(lib, "arena_dense_clipped") and not caplog.records
    assert native.path("dense", dense_kernel.SOURCE + " ") != target  # another source: another library


def test_without_a_compiler_or_with_a_compile_error_build_says_why(empty_folder, monkeypatch):
    monkeypatch.setenv("CC", str(empty_folder / "no-such-compiler"))
    with pytest.raises(FileNotFoundError, match="no C compiler"):
        native.build("dense", dense_kernel.SOURCE)
    monkeypatch.delenv("CC")
    with pytest.raises(subprocess.CalledProcessError) as err:
        native.build("broken", "int f( {")
    assert "error" in err.value.stderr
    assert not list(empty_folder.glob("broken-*"))


def test_a_library_others_could_write_is_not_loaded(empty_folder):
    built = native.build("dense", dense_kernel.SOURCE)
    built.chmod(0o777)
    assert _load() is None
    built.chmod(0o755)
    empty_folder.chmod(0o777)
    assert _load() is None
    empty_folder.chmod(0o700)
    assert _load() is not None
