"""Hostile attacks (``hostile_attacks.py``) through the tournament: each fails its own matchup or scores at
chance, the honest matchups beside it keep their results, nothing they print reaches the arena raw, and no
process of theirs outlives the run.

One serial run of every route (and the honest loss- and confidence-threshold attacks before and after them)
against a non-private MLP on 30 digits members, where the honest attacks reach AUC ≈ 0.85, is compared with a
run of the honest attacks alone (the same secret, so the same game and release); one Ray run plays the routes
against other matchups (signals, daemons, patches) with two workers at once. The assertions share those runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from arena.pipeline.sandbox import ERROR_CHARS, TRACEBACK_CHARS, Limits, printable
from arena.pipeline.scenario import ScenarioError
from arena.pipeline.store import SECRET_ENV, RunStore
from arena.plugins import forget_registries
from tests.conftest import TEST_SECRET, shared_dir
from tests.pipeline.sandbox import hostile_attacks as hostile

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]

CHANCE_AUC = 0.6
HONEST = ("loss", "confidence")
"""The honest loss- and confidence-threshold attacks, as their rows are keyed here."""
CACHE_QUOTA = 1 << 20
SCENARIO = """
name: hostile
seeds: [0]
timeout: 240
retries: %(retries)d
tracks:
  - name: digits-mlp
    dataset: {name: digits}
    model: {name: mlp, hidden: [64], activation: relu}
    training: {epochs: 100, batch_size: 8, lr: 0.1, momentum: 0.9}
    game: {name: membership, members: 30, test: 100, population: 200}
    defenses:
      - {name: nonprivate}
    attacks:
%(attacks)s
"""


def scenario(path: Path, attacks: list[str], retries: int = 0) -> Path:
    listing = "\n".join(f"      - {{name: {a}}}" for a in attacks)
    path.write_text(textwrap.dedent(SCENARIO % {"attacks": listing, "retries": retries}))
    return path


def install(site: Path, mp: pytest.MonkeyPatch, dist: str, module: str, source: str) -> None:
    """A real plugin distribution on the path, as ``tests/conftest.py``'s ``plugin_dist`` writes one (here for
    the module's shared runs, which a function-scoped fixture cannot serve)."""
    (site / f"{module}.py").write_text(source)
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[arena]\n{module} = {module}\n")
    mp.delitem(sys.modules, module, raising=False)


def sandbox_processes(*mentions: str) -> list[str]:
    """Running processes (not zombies, which have ended) whose command line or working directory mentions one of
    ``mentions`` (the run directory, the notes folder), and those of a sandbox user whose environment does (every
    attack's names the notes folder): the attacks of other test sessions on the machine are not counted."""
    base = Limits.from_env().uid_base  # a pytest-xdist worker sets its own
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        with contextlib.suppress(OSError, StopIteration, ValueError):
            status = Path(f"/proc/{entry}/status").read_text()
            if next(line for line in status.splitlines() if line.startswith("State:")).split()[1] in ("Z", "X"):
                continue
            uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = Path(f"/proc/{entry}/environ").read_bytes().decode(errors="replace")
            try:
                cwd = os.readlink(f"/proc/{entry}/cwd")
            except OSError:
                cwd = ""
            if any(m in cmdline or m in cwd or (uid >= base and m in environ) for m in mentions):
                found.append(f"pid {entry} uid {uid}{' (sandbox user)' if uid >= base else ''}: {cmdline[:120]!r} "
                             f"in {cwd!r}")
    return found


def leftovers(*mentions: str) -> list[str]:
    """``sandbox_processes`` once they have had a few seconds to be reaped."""
    deadline = time.monotonic() + 10
    while (found := sandbox_processes(*mentions)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


def cache_bytes(run: Path) -> int:
    return sum(p.stat().st_size for p in (run / "cache").rglob("*.safetensors"))


@dataclass
class Runs:
    base: Path
    notes: Path
    hostile: dict[str, dict] = field(default_factory=dict)
    reference: dict[str, dict] = field(default_factory=dict)
    ray: dict[str, dict] = field(default_factory=dict)
    output: str = ""
    results_bytes: int = 0
    cache_growth: int = 0
    left: list[str] = field(default_factory=list)
    ray_left: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    def observed(self, name: str) -> list[dict]:
        return [json.loads(p.read_text()) for p in sorted(self.notes.glob(f"{name}.*.json"))]


def _rows(out: Path) -> dict[str, dict]:
    """Rows by attack name (the honest threshold attacks by their signal)."""
    return {r["attack_params"]["signal"] if r["attack"] == "threshold-mia" else r["attack"]: r
            for r in RunStore(out).results()}


@contextlib.contextmanager
def captured_fds(path: Path) -> Iterator[None]:
    """The process's standard output and error (the descriptors, which forked children share) into ``path``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved, streams = [os.dup(1), os.dup(2)], (sys.stdout, sys.stderr)
    with open(path, "a", buffering=1, encoding="utf-8", errors="backslashreplace") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        sys.stdout = sys.stderr = f
        try:
            yield
        finally:
            sys.stdout, sys.stderr = streams
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    from arena.api import run

    tmp = tmp_path_factory.mktemp("hostile")
    base = shared_dir("arena-hostile-", 0o755)  # the notes inside: out of the sweep of the attacks' files
    notes = base / "notes"
    notes.mkdir()
    notes.chmod(0o777)  # the attacks' users write what they saw here
    site = tmp / "site"
    site.mkdir()
    names = [c.name for c in hostile.ALL]
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(site))
        mp.setenv("PYTHONPATH", str(site))
        mp.setenv(SECRET_ENV, TEST_SECRET)
        mp.setenv(hostile.HINT, str(notes))
        mp.setenv("ARENA_SANDBOX_CACHE_BYTES", str(CACHE_QUOTA))
        mp.delenv(hostile.STASH, raising=False)
        install(site, mp, "arena-hostile", "arena_hostile", Path(hostile.__file__).read_text())
        forget_registries()
        runs = Runs(base, notes)
        honest = ["threshold-mia", "threshold-mia, signal: confidence"]
        t0 = time.monotonic()
        run(scenario(tmp / "reference.yaml", honest), base / "reference", serial=True, report=False)
        runs.seconds["reference"] = time.monotonic() - t0
        runs.reference = _rows(base / "reference")
        out = base / "run"
        t0 = time.monotonic()
        with captured_fds(tmp / "output.txt"):
            run(scenario(tmp / "hostile.yaml", [honest[0], *names, honest[1]]), out, serial=True, report=False)
        runs.seconds["serial"] = time.monotonic() - t0
        runs.output = (tmp / "output.txt").read_text(errors="replace")
        runs.hostile = _rows(out)
        runs.results_bytes = (out / "results.jsonl").stat().st_size
        runs.cache_growth = cache_bytes(out) - cache_bytes(base / "reference")
        runs.left = leftovers(str(out), str(notes))
        import ray

        against = [hostile.Stopper.name, hostile.Daemon.name, hostile.ScorePatch.name, hostile.InitPatch.name,
                   hostile.PickleHook.name, hostile.ForkBomb.name]
        t0 = time.monotonic()
        try:
            run(scenario(tmp / "ray.yaml", [honest[0], *against, honest[1]]), base / "ray", workers=2,
                report=False)
        finally:
            ray.shutdown()
        runs.seconds["ray"] = time.monotonic() - t0
        runs.ray = _rows(base / "ray")
        runs.ray_left = leftovers(str(base / "ray"), str(notes))
        forget_registries()
        yield runs
    shutil.rmtree(base, ignore_errors=True)


def at_chance(row: dict) -> None:
    assert row["status"] == "ok", (row["attack"], row["status"], row["error"])
    assert row["metrics"]["auc"] <= CHANCE_AUC, (row["attack"], row["metrics"]["auc"])


def test_the_honest_attacks_succeed_and_keep_their_results_beside_every_route(runs: Runs) -> None:
    for label in HONEST:
        reference = runs.reference[label]
        assert reference["status"] == "ok" and reference["metrics"]["auc"] > 0.75, (label, reference["metrics"])
        for rows in (runs.hostile, runs.ray):
            assert rows[label]["status"] == "ok", rows[label]["error"]
            assert rows[label]["metrics"] == reference["metrics"], f"{label}: scored differently beside the routes"
    assert len(runs.hostile) == len(hostile.ALL) + 2 and len(runs.ray) == 8


def test_pickling_hooks_and_init_patches_never_run_in_the_arena(runs: Runs) -> None:
    """The arena builds, reads and pickles no attack: a ``__getstate__``/``__reduce__`` reading the caller's frames
    and an ``__init__`` patching the game class find nothing (they run in the attack's own process)."""
    for rows in (runs.hostile, runs.ray):
        at_chance(rows[hostile.PickleHook.name])
        at_chance(rows[hostile.InitPatch.name])
    patched = runs.observed("init-patch")
    assert len(patched) == 2, "__init__ ran once per matchup, in the attack's process"


def test_a_threat_model_widened_in_init_is_not_what_the_view_grants(runs: Runs) -> None:
    row = runs.hostile[hostile.Widen.name]
    assert row["status"] == "failed" and row["error"].startswith("ThreatModelError"), row["error"]
    assert "'query'" in row["error"]
    assert row["threat_model"] == ["labels"], "the row records the planned (class) threat model"
    assert runs.hostile[HONEST[0]]["threat_model"] == ["population", "query"]


def test_patching_the_scoring_in_the_attacks_process_changes_no_score(runs: Runs) -> None:
    for rows in (runs.hostile, runs.ray):
        at_chance(rows[hostile.ScorePatch.name])  # and the honest rows after it: the first test


def test_a_setsid_daemon_dies_with_its_matchup_and_harms_no_other(runs: Runs) -> None:
    for rows in (runs.hostile, runs.ray):
        row = rows[hostile.Daemon.name]
        assert row["status"] == "ok" or row["error"].startswith("worker died"), row["error"]
        if row["status"] == "ok":
            assert row["metrics"]["auc"] <= CHANCE_AUC
    daemons = runs.observed("daemon")
    assert len(daemons) == 2, "a daemon started in each run"
    for d in daemons:
        assert d["uid"] >= Limits.from_env().uid_base, "the daemon runs as its attack's own user"
        assert not Path(f"/proc/{d['pid']}").exists(), f"daemon {d['pid']} outlived its matchup"


def test_no_attack_can_stop_a_sibling_the_fork_server_or_the_arena(runs: Runs) -> None:
    for rows in (runs.hostile, runs.ray):
        at_chance(rows[hostile.Stopper.name])
    for seen in runs.observed("stop"):
        assert seen["stopped"] == [] and seen["refused"] >= 2, seen  # the arena and the fork server at least


def test_a_fork_bomb_is_bounded_by_rlimit_nproc_and_swept(runs: Runs) -> None:
    for rows in (runs.hostile, runs.ray):
        at_chance(rows[hostile.ForkBomb.name])
    for seen in runs.observed("fork-bomb"):
        assert seen["forked"] < Limits().nproc and "Resource temporarily unavailable" in seen["error"], seen


def test_query_and_training_amplification_are_refused_as_the_attacks_failure(runs: Runs) -> None:
    query = runs.hostile[hostile.QueryFlood.name]
    assert query["status"] == "failed" and query["error"].startswith("quota:"), query["error"]
    assert "queried 2000000 rows at once" in query["error"]
    train = runs.hostile[hostile.TrainFlood.name]
    assert train["status"] == "failed" and train["error"].startswith("quota:"), train["error"]
    assert "model-record-epochs in one call" in train["error"]


def test_an_attack_adds_at_most_its_quota_to_the_shared_cache(runs: Runs) -> None:
    at_chance(runs.hostile[hostile.CacheFlood.name])
    assert runs.observed("cache-flood") == [{"calls": 30}]
    per_call = 8 * (64 * 64 + 64 + 64 * 10 + 10) * 4  # eight models' parameters
    assert runs.cache_growth <= CACHE_QUOTA + 2 * per_call, runs.cache_growth
    assert runs.cache_growth < 30 * per_call / 2, "without the quota all 30 calls would be cached"


def test_output_and_errors_are_escaped_and_capped(runs: Runs) -> None:
    row = runs.hostile[hostile.Output.name]
    assert row["status"] == "failed" and row["error"].startswith("ValueError: \\x1b]0;pwned\\x07"), row["error"][:80]
    assert len(row["error"]) <= ERROR_CHARS + 100 and len(row["traceback"]) <= TRACEBACK_CHARS + 100
    assert printable(row["error"]) == row["error"] and printable(row["traceback"]) == row["traceback"]
    full = RunStore(runs.base / "run").artifact_dir(row["key"]) / "error.txt"
    assert 1 << 19 < full.stat().st_size <= (1 << 20) + 4096, "the longer text kept beside the artifacts, capped"
    assert runs.results_bytes < 200_000, "a 20 MB error is not stored whole"
    text = runs.output
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text, "no raw control character printed"
    relayed = [line for line in text.splitlines() if line.startswith(f"[{hostile.Output.name}] ")]
    assert sum(len(line) for line in relayed) <= Limits().output_bytes * 2 + 1000
    assert any(line.startswith(f"[{hostile.Output.name}] [truncated: ") for line in relayed)
    assert any("\\x1b]0;pwned\\x07" in line for line in relayed), "its output is relayed, escaped"
    assert text.count("matchups ") >= 1 and "FAILED digits-mlp" in text, "the arena's own lines are all there"


def test_an_attack_holds_no_descriptor_of_the_arenas(runs: Runs) -> None:
    """Its standard streams, its own pipe, and import directories (read-only) only: no file of the run directory,
    no socket of the fork server or of another attack; what it wrote into them reached nobody (the honest rows
    are unchanged: the first test)."""
    at_chance(runs.hostile[hostile.FdTricks.name])
    (seen,) = runs.observed("fd-tricks")
    targets = list(seen["held"].values())
    assert not [t for t in targets if str(runs.base) in t], targets
    assert sum(t.startswith("socket:") for t in targets) <= 1, f"its own pipe only: {targets}"
    assert all(t.startswith(("socket:", "pipe:", "anon_inode:", "/")) for t in targets), targets
    assert all(os.path.isdir(t) or t in ("/dev/null",) for t in targets if t.startswith("/")), targets


def test_no_process_of_the_runs_remains(runs: Runs) -> None:
    assert runs.left == [], runs.left
    assert runs.ray_left == [], runs.ray_left


def test_the_suite_stays_modest(runs: Runs) -> None:
    for name, rows in (("serial", runs.hostile), ("ray", runs.ray)):  # the measured outcome of every route (-s)
        for key, row in rows.items():
            auc = row["metrics"].get("auc")
            print(f"{name:6} {key:24} {row['status']:7} {'' if auc is None else f'AUC {auc:.3f}':10} "
                  f"{(row['error'] or '')[:90]}")
    print(f"seconds: {runs.seconds}; cache growth {runs.cache_growth} bytes; results.jsonl {runs.results_bytes} bytes")
    for name in ("fork-bomb", "stop", "daemon", "init-patch", "cache-flood"):
        print(name, runs.observed(name))
    # wall time, on a machine that other jobs may load: no route holds its matchup near its timeout (240 s), and
    # the three runs stay well below what a run of hanging routes would take
    slow = {key: row["seconds"] for rows in (runs.hostile, runs.ray) for key, row in rows.items()
            if row["seconds"] > 120}
    assert not slow, slow
    assert sum(runs.seconds.values()) < 900, runs.seconds


# --- where the arena held the attack, the routes worked: the game's process, the attack's own object ---


def test_in_the_arena_the_hooks_the_descriptor_the_init_patch_and_the_widening_give_the_game_away(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As it was before the attack was built in its own process: the game on the stack when the arena pickles the
    attack or reads its ``name``, the game class shared with ``__init__``, the view built from the instance."""
    import pickle

    from arena.contracts.spec import PluginRef
    from arena.engine.recipe import Recipe
    from arena.games.membership import MembershipGameSpec
    from arena.pipeline.plan import load_dataset
    from arena.pipeline.procedure import TrainingProcedure
    from arena_plugins.defenses import NonPrivate
    from tests.conftest import architecture

    game = hostile.MembershipGame(MembershipGameSpec(name="membership", members=30, test=100, population=200),
                                  load_dataset(PluginRef(name="digits")), 12345)
    procedure = TrainingProcedure(NonPrivate(NonPrivate.Params()), architecture("mlp", (1, 8, 8), 10, hidden=[64]),
                                  Recipe(epochs=100, lr=0.1, momentum=0.9, batch_size=8))
    release = game.release(procedure)

    def auc(attack: object) -> float:
        return game.score(attack, attack.run(game.view(attack, release, procedure))).metrics["auc"]

    monkeypatch.setattr(hostile.MembershipGame, "view", hostile.MembershipGame.view)  # restored afterwards
    monkeypatch.setenv(hostile.STASH, "")  # the patched view sets it in this process: absent again afterwards
    monkeypatch.delenv(hostile.STASH)
    try:
        for cls in (hostile.PickleHook, hostile.NameDescriptor):
            os.environ.pop(hostile.STASH, None)
            attack = cls(cls.Params())
            if cls is hostile.PickleHook:
                pickle.dumps(attack)  # as the arena did, the game in scope
            else:
                assert attack.name == "hostile-name"  # as the view did
            assert auc(attack) == 1.0, cls.__name__
        os.environ.pop(hostile.STASH, None)
        assert auc(hostile.InitPatch(hostile.InitPatch.Params())) == 1.0
    finally:
        os.environ.pop(hostile.STASH, None)
    assert auc(hostile.Widen(hostile.Widen.Params())) > 0.75, "a label-only attack scoring by loss"


# --- declarations the plan refuses before any work: a name descriptor, a mutable threat model ---


def test_an_attack_declaring_anything_but_plain_values_is_refused_at_validation(plugin_dist, tmp_path: Path) -> None:
    from arena.pipeline.plan import plan

    plugin_dist("arena-hostile", "arena_hostile", Path(hostile.__file__).read_text())
    path = scenario(tmp_path / "bad.yaml", [c.name if isinstance(c.name, str) else "hostile-name"
                                            for c in hostile.UNPLANNABLE])
    with pytest.raises(ScenarioError) as info:
        plan([path])
    problems = "\n".join(info.value.problems)
    assert "attack 'hostile-name': its class attribute 'name' must be a plain, non-empty str; it declares a " \
           "_Sneaky" in problems
    assert "attack 'hostile-threat-set': its class attribute 'threat_model' must be a plain frozenset" in problems


# --- the fork server's death is the arena's fault, not the attack's ---


def test_a_fork_server_death_mid_attack_is_retried_not_charged(plugin_dist, tmp_path: Path, monkeypatch) -> None:
    from arena.api import run
    from arena.pipeline.sandbox import server

    notes = shared_dir("arena-hostile-notes-")
    monkeypatch.setenv(hostile.HINT, str(notes))
    plugin_dist("arena-hostile", "arena_hostile", Path(hostile.__file__).read_text())
    killed: list[int] = []

    def kill_the_server_once_it_runs() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not list(notes.glob("slow-first.*.json")):
            time.sleep(0.05)
        forks = server._server
        if forks is not None:
            killed.append(forks.process.pid)
            os.kill(forks.process.pid, signal.SIGKILL)

    watcher = threading.Thread(target=kill_the_server_once_it_runs, daemon=True)
    watcher.start()
    try:
        out = tmp_path / "run"
        run(scenario(tmp_path / "s.yaml", [hostile.SlowFirst.name], retries=1), out, serial=True, report=False)
        watcher.join(5)
        (row,) = RunStore(out).results()
    finally:
        shutil.rmtree(notes, ignore_errors=True)
    assert killed, "the fork server was killed while the attack ran"
    assert row["status"] == "ok" and row["metrics"]["auc"] == 0.5, (row["status"], row["error"])
    assert len(list(RunStore(out).results())) == 1, "one row: the first try was not charged to the attack"
