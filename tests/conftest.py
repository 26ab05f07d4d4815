"""Shared fixtures: real third-party plugin distributions on sys.path, fresh registries, tiny scenarios."""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from arena.engine import native
from arena.engine.architecture import Architecture
from arena.plugins import forget_registries, registries


def architecture(name: str, input_shape: int | tuple[int, ...], n_classes: int, **params: object) -> Architecture:
    """The registered model plugin ``name`` with ``params``, bound to records of ``input_shape`` (an int: flat
    records of that many features) and ``n_classes`` classes, exactly as a scenario's track would build it."""
    cls = registries().models.get(name)
    shape = (input_shape,) if isinstance(input_shape, int) else tuple(input_shape)
    return Architecture(cls(cls.Params.model_validate(params)), shape, n_classes)


# Ray starts its workers at nice 15: on a machine busy with anything else they get next to no CPU, and a matchup's
# clock, which runs from its submission, expires while its release waits to train (180 s were not enough at a load
# of 8 busy processes on 2 cores). The suite's Ray workers run at the priority of the suite itself.
os.environ.setdefault("RAY_worker_niceness", "0")

# Under pytest-xdist (`make test` runs two workers) each worker's sandboxed attacks take users of their own range
# (``ARENA_SANDBOX_UID_BASE`` + pid, pids below 2**22), so a test counting the processes of sandbox users sees only
# its own worker's; and torch keeps to one thread a worker, as the arena's own workers do.
WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
UID_SPAN = 1 << 23
"""The users a worker's attacks may take: [base, base + UID_SPAN)."""
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault("ARENA_SANDBOX_UID_BASE", str(0x78000000 - WORKER * UID_SPAN))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)

# The compiled kernels (``arena.engine.native``) are the ones `make setup` built into the user's cache folder (the
# suite never builds them): their folder is pinned before the cache folder moves. ``ARENA_KERNELS=off`` runs the
# suite in pure PyTorch, ``on`` requires them.
os.environ.setdefault(native.FOLDER, str(native.folder()))

# Noise calibrations (``arena.privacy.noise_store``) are shared by the suite's processes, never the user's cache:
# the first process to import this (pytest, or the xdist controller, before it starts its workers) picks the folder.
if "ARENA_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["ARENA_CACHE_DIR"] = tempfile.mkdtemp(prefix="arena-test-cache-")
    atexit.register(shutil.rmtree, os.environ["ARENA_CACHE_DIR"], ignore_errors=True)

# Trust zones (``arena.trust``): the user's untrusted site and trusted names stay out of the suite; a test that
# needs them sets its own.
os.environ["ARENA_UNTRUSTED_SITE"] = os.path.join(os.environ["ARENA_CACHE_DIR"], "no-untrusted-site")
os.environ.pop("ARENA_TRUSTED", None)

TEST_SECRET = "a7" * 32
"""The run secret of every run directory a test creates (``ARENA_RUN_SECRET``), so that the suite's numbers are
the same on every machine; tests of the secret itself unset it."""


@pytest.fixture(autouse=True)
def fixed_run_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARENA_RUN_SECRET", TEST_SECRET)


@pytest.fixture(autouse=True)
def fresh_registries() -> Iterator[None]:
    """Every test builds registries from the plugins visible to it, and leaves none behind."""
    forget_registries()
    yield
    forget_registries()


PluginFactory = Callable[..., Path]


@pytest.fixture
def plugin_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PluginFactory:
    """Write a real distribution (module + ``.dist-info`` with ``entry_points.txt``) and put it on the path.

    The folder is also put on PYTHONPATH so Ray workers started afterwards import the same plugin. It is installed
    as ``pip install -e`` would record it (``direct_url.json``: an editable local directory), so its source is
    hashed into its matchups' keys (``arena.pipeline.provenance``); ``editable=False`` leaves that record out
    (the folder is no ``site-packages``, so the source is hashed all the same).
    """
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))

    def make(dist: str, module: str, source: str, version: str = "1.0", entry: str | None = None,
             editable: bool = True) -> Path:
        (site / f"{module}.py").write_text(textwrap.dedent(source))
        monkeypatch.delitem(sys.modules, module, raising=False)  # another test may have loaded a same-named one
        info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text(f"[arena]\n{entry or module} = {module}\n")
        if editable:
            (info / "direct_url.json").write_text(json.dumps({"url": site.as_uri(), "dir_info": {"editable": True}}))
        forget_registries()
        return site

    return make


# --- test tiers (markers registered in pyproject.toml; `make test-fast` deselects slow, ray and subprocess) ---

TIERS = ("slow", "ray", "subprocess")
SLOW_SECONDS = 1.0
"""A test whose set-up and call take over this much of the suite process's CPU time is marked ``slow``: what keeps
`make test-fast` under a minute on 2 cores. CPU time, not wall time, so that a loaded machine judges alike (the
CPU of the processes a test starts is not counted: those tests are ``subprocess`` or ``ray``)."""

_FIXTURE_TIERS = {"plugin_dist": "subprocess", "ray_session": "ray"}
"""Fixtures that put a test in a tier by themselves: a plugin distribution on the path (the arena's worker
processes import it), a Ray instance."""

_IMPORTS_RAY = re.compile(r"^\s*(import ray\b|from ray[. ])", re.MULTILINE)


@functools.cache
def _starts_ray(function: Callable[..., object]) -> bool:
    """Whether a test or fixture imports Ray in its own body (a local ``ray``, imported there)."""
    if "ray" not in getattr(getattr(function, "__code__", None), "co_varnames", ()):
        return False
    try:
        return _IMPORTS_RAY.search(inspect.getsource(function)) is not None
    except (OSError, TypeError):
        return False


_cpu_seconds: dict[str, float] = {}
_untiered_slow: list[tuple[str, float]] = []


FILE_SECONDS = Path(__file__).with_name("file_seconds.json")
"""Each test file's seconds in a full run (``pytest --store-file-seconds`` rewrites it). Files run longest first, so
that xdist's workers, handed one file at a time, do not end with one long file on one worker and the other idle."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--store-file-seconds", action="store_true",
                     help=f"write each test file's seconds in this run to {FILE_SECONDS.name}")


def _longest_files_first(items: list[pytest.Item]) -> None:
    try:
        seconds = json.loads(FILE_SECONDS.read_text())
    except (OSError, ValueError):
        return
    items.sort(key=lambda item: -float(seconds.get(item.nodeid.split("::")[0], 0.0)))  # stable: a file's order kept


_file_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Sum each file's seconds (for ``--store-file-seconds``); remember the passing tests in no tier whose set-up
    and call took over ``SLOW_SECONDS`` of CPU."""
    file = report.nodeid.split("::")[0]
    _file_seconds[file] = _file_seconds.get(file, 0.0) + report.duration
    if report.when == "call" and report.passed:
        cpu = _cpu_seconds.pop(report.nodeid, 0.0)
        if cpu > SLOW_SECONDS and not set(report.keywords) & set(TIERS):
            _untiered_slow.append((report.nodeid, cpu))


def pytest_sessionfinish(session: pytest.Session) -> None:
    if session.config.getoption("--store-file-seconds") and not hasattr(session.config, "workerinput"):
        FILE_SECONDS.write_text(json.dumps({f: round(t, 1) for f, t in sorted(_file_seconds.items())}, indent=0)
                                + "\n")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tier tests by what they use, so that a new one is tiered without thought: the fixtures it needs, at any
    depth (``plugin_dist``, ``ray_session``, or one that imports Ray), or ``import ray`` in its own body. Then the
    longest files first (``FILE_SECONDS``)."""
    _longest_files_first(items)
    for item in items:
        names = getattr(item, "fixturenames", ())
        for fixture, tier in _FIXTURE_TIERS.items():
            if fixture in names:
                item.add_marker(tier)
        info = getattr(item, "_fixtureinfo", None)
        definitions = info.name2fixturedefs if info is not None else {}
        fixtures = [defs[-1].func for name in names for defs in [definitions.get(name)] if defs]
        if any(_starts_ray(f) for f in [getattr(item, "function", None), *fixtures]):
            item.add_marker("ray")


def _timed(item: pytest.Item) -> Iterator[None]:
    start = time.process_time()
    try:
        yield
    finally:
        _cpu_seconds[item.nodeid] = _cpu_seconds.get(item.nodeid, 0.0) + time.process_time() - start


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    return (yield from _timed(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    return (yield from _timed(item))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Name the tests that took over ``SLOW_SECONDS`` of CPU in no tier, to be marked ``slow``."""
    if _untiered_slow:
        terminalreporter.section(f"tests over {SLOW_SECONDS:g} s of CPU in no tier (slow, ray, subprocess)")
        for nodeid, seconds in sorted(_untiered_slow, key=lambda t: -t[1]):
            terminalreporter.write_line(f"{seconds:6.1f}s {nodeid}")


def write_scenario(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


TINY = """
name: tiny
seeds: [0, 1]
tracks:
  - name: digits-small
    dataset: {name: digits}
    model: {name: mlp, hidden: [16], activation: relu}
    training: {epochs: 5, batch_size: 32, lr: 0.1, momentum: 0.9}
    game: {name: membership, members: 50, test: 100}
    defenses:
      - {name: nonprivate}
      - {name: dpsgd, epsilons: [4], delta: 1.0e-3}
    attacks:
      - {name: threshold-mia}
"""


@pytest.fixture
def tiny_scenario(tmp_path: Path) -> Path:
    return write_scenario(tmp_path / "tiny.yaml", TINY)


def shared_dir(prefix: str, mode: int = 0o777) -> Path:
    """A folder the attacks' users may write what they observed into, for a test to read: outside the scratch roots
    (``/tmp``, ``/var/tmp``, ``/dev/shm``), where the sandbox removes every file of an attack's user when it ends
    (``arena.pipeline.sandbox.scratch``); ``/run`` where this process may write there (root), else the default."""
    root = "/run" if os.geteuid() == 0 and os.access("/run", os.W_OK) else None
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    path.chmod(mode)
    return path
