"""The routes issue 40 left open, through the tournament (``route_attacks.py``): an unbounded number in a guess
(D), forged output (E), a full ``/dev/shm`` (G), files left behind (H) and Ray's sockets (I). Each hostile attack
fails its own matchup or scores at chance, the honest matchups beside it keep their results (serial and Ray
alike), no raw control character reaches the output, nothing of the attacks' remains on disk, and the board
and the report read the run."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from arena.pipeline.sandbox.scratch import close_sockets, sweep_files
from arena.pipeline.store import SECRET_ENV, RunStore
from arena.plugins import forget_registries
from tests.conftest import TEST_SECRET, shared_dir
from tests.pipeline.sandbox import route_attacks as routes
from tests.pipeline.sandbox.test_hostile_attacks import HONEST, captured_fds, install, leftovers, scenario
from tests.pipeline.sandbox.test_sandbox import ROOT_ONLY

CHANCE_AUC = 0.6
TMP_QUOTA = 16 << 20


@dataclass
class Runs:
    base: Path
    notes: Path
    open_dir: Path
    serial: dict[str, dict] = field(default_factory=dict)
    ray: dict[str, dict] = field(default_factory=dict)
    reference: dict[str, dict] = field(default_factory=dict)
    output: str = ""
    left: list[str] = field(default_factory=list)
    sockets_after: list[str] = field(default_factory=list)

    def observed(self, name: str) -> list[dict]:
        return [json.loads(p.read_text()) for p in sorted(self.notes.glob(f"{name}.*.json"))]


def _rows(out: Path) -> dict[str, dict]:
    return {r["attack_params"]["signal"] if r["attack"] == "threshold-mia" else r["attack"]: r
            for r in RunStore(out).results()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    from arena.api import run

    tmp = tmp_path_factory.mktemp("routes")
    base = shared_dir("arena-routes-", 0o755)
    notes = base / "notes"
    notes.mkdir()
    notes.chmod(0o777)
    open_dir = Path(tempfile.mkdtemp(prefix="arena-routes-open-"))  # under /tmp, open to all, nested
    open_dir.chmod(0o755)
    (open_dir / "a" / "b").mkdir(parents=True)
    for p in (open_dir / "a", open_dir / "a" / "b"):
        p.chmod(0o777)
    site = tmp / "site"
    site.mkdir()
    made = Runs(base, notes, open_dir / "a" / "b")
    honest = ["threshold-mia", "threshold-mia, signal: confidence"]
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(site))
        mp.setenv("PYTHONPATH", str(site))
        mp.setenv(SECRET_ENV, TEST_SECRET)
        mp.setenv("HOSTILE_DIR", str(notes))
        mp.setenv("ROUTE_OPEN", str(made.open_dir))
        mp.setenv("ARENA_SANDBOX_TMP_BYTES", str(TMP_QUOTA))
        install(site, mp, "arena-routes", "arena_routes", Path(routes.__file__).read_text())
        forget_registries()
        run(scenario(tmp / "reference.yaml", honest), base / "reference", serial=True, report=False)
        made.reference = _rows(base / "reference")
        names = [c.name for c in routes.ALL if c is not routes.ForgedParams]
        names += [f"{routes.ForgedParams.name}, tag: a", f"{routes.ForgedParams.name}, tag: b"]  # labels differ
        with captured_fds(tmp / "output.txt"):
            run(scenario(tmp / "serial.yaml", [honest[0], *names, honest[1]]), base / "serial", serial=True,
                report=True)
        made.output = (tmp / "output.txt").read_text(errors="replace")
        made.serial = _rows(base / "serial")
        import ray

        from arena.pipeline.sandbox import scratch

        sessions: list[str] = []
        closing = scratch.close_sockets
        mp.setattr(scratch, "close_sockets", lambda path: (sessions.append(path), closing(path)))
        try:
            with captured_fds(tmp / "ray.txt"):
                run(scenario(tmp / "ray.yaml", [honest[0], routes.Scratch.name, routes.Sockets.name, honest[1]]),
                    base / "ray", workers=2, report=False)
        finally:
            ray.shutdown()
        sockets = Path(sessions[0]) / "sockets"  # Ray removed its sockets on shutdown; nothing was moved
        made.sockets_after = [oct(stat.S_IMODE(sockets.stat().st_mode)), *sorted(p.name for p in sockets.iterdir())]
        made.output += (tmp / "ray.txt").read_text(errors="replace")
        made.ray = _rows(base / "ray")
        made.left = leftovers(str(base / "serial"), str(base / "ray"), str(notes))
        forget_registries()
        yield made
    shutil.rmtree(base, ignore_errors=True)
    shutil.rmtree(open_dir, ignore_errors=True)


def at_chance_or_failed(row: dict) -> None:
    assert row["status"] == "failed" or row["metrics"]["auc"] <= CHANCE_AUC, (row["attack"], row["metrics"])


pytestmark = [pytest.mark.slow, pytest.mark.subprocess, pytest.mark.ray, ROOT_ONLY]


def test_the_honest_attacks_keep_their_results_beside_the_routes(runs: Runs) -> None:
    for label in HONEST:
        for rows in (runs.serial, runs.ray):
            assert rows[label]["status"] == "ok", rows[label]["error"]
            assert rows[label]["metrics"] == runs.reference[label]["metrics"], label
    for rows in (runs.serial, runs.ray):
        for name, row in rows.items():
            if name not in HONEST:
                at_chance_or_failed(row)


def test_an_unbounded_number_in_a_guess_fails_its_matchup_and_the_board_reads_the_run(runs: Runs, capsys) -> None:
    from arena.cli import main

    row = runs.serial[routes.BigNumber.name]
    assert row["status"] == "failed" and "references" in row["error"] and "2^53" in row["error"], row["error"]
    assert (runs.base / "serial" / "report" / "index.html").exists(), "the report was written"
    assert main(["leaderboard", str(runs.base / "serial")]) == 0
    assert "OverflowError" not in capsys.readouterr().err


def test_forged_output_is_escaped_and_a_newline_forges_no_line(runs: Runs) -> None:
    text = runs.output
    assert not any(c in text for c in "\x1b\x07\u202e"), "no raw control character printed"
    assert not [line for line in text.splitlines() if line.startswith((routes.FORGED, "DP audit"))]
    assert f"  | {routes.FORGED}" in text
    assert runs.serial[routes.NewlineError.name]["status"] == "failed"
    label = runs.serial[routes.ForgedParams.name]["attack_label"]
    assert "\x1b" not in label and "\\x1b]0;pwned" in label and "\n" not in label, label


def test_dev_shm_is_the_attacks_own_and_capped(runs: Runs) -> None:
    (seen,) = runs.observed("shm")
    assert seen["wrote"] <= TMP_QUOTA and seen["error"] == "OSError", seen
    assert seen["tmpdir"] == "/dev/shm", "its TMPDIR is its private tmpfs"
    assert not Path("/dev/shm/route-fill").exists()


def test_nothing_the_attacks_wrote_survives_them(runs: Runs) -> None:
    left = [p for seen in runs.observed("scratch") for p in seen["left"]]
    assert str(runs.open_dir / "route-left-") in " ".join(left), "it wrote into a nested open folder"
    assert [p for p in left if os.path.lexists(p)] == []
    assert list(runs.open_dir.iterdir()) == []
    assert runs.left == []


def test_rays_sockets_are_out_of_the_attacks_reach(runs: Runs) -> None:
    seen = runs.observed("sockets")
    assert seen and all(s["renamed"] == [] for s in seen), seen
    assert all(s["found"] == [] for s in seen), "Ray's folders are hidden from the attack"
    assert runs.sockets_after[0] == "0o755", "the session's sockets folder is closed to the attacks' users"
    assert not [name for name in runs.sockets_after if name.endswith(".moved")], runs.sockets_after


# --- the mechanisms, one at a time ---


def _as_user(uid: int, action) -> int:
    """Run ``action()`` in a child as user ``uid``; its exit status is 0 where it raised ``OSError``."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            action()
        except OSError:
            os._exit(0)
        os._exit(1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_the_sweep_removes_a_users_files_at_any_depth_and_nothing_else(tmp_path: Path) -> None:
    uid = 0x78000000 + 7
    root = Path(tempfile.mkdtemp(prefix="arena-sweep-"))
    try:
        root.chmod(0o755)
        deep = root / "open" / "deeper"
        deep.mkdir(parents=True)
        for p in (root / "open", deep):
            p.chmod(0o777)
        mine, theirs = deep / "mine", deep / "theirs"
        mine.write_text("x")
        theirs.write_text("y")
        os.chown(mine, uid, uid)
        (deep / "tree").mkdir()
        (deep / "tree" / "inner").write_text("z")
        os.chown(deep / "tree", uid, uid)
        outside = tmp_path / "outside"
        outside.write_text("kept")
        os.chown(outside, uid, uid)
        (deep / "link").symlink_to(tmp_path)
        os.lchown(deep / "link", uid, uid)
        sweep_files(uid, (str(root),))
        assert not mine.exists() and not (deep / "tree").exists() and not os.path.lexists(deep / "link")
        assert theirs.exists() and outside.exists(), "another's file, and what a link pointed at, are kept"
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give files another user")
def test_a_sweep_since_the_attacks_start_lists_only_folders_changed_since_and_finds_what_it_made() -> None:
    """With the attack's start, a folder modified before it is searched for subfolders only: a file of the user's
    there (planted by root with a back-dated folder, which the user itself cannot do) is skipped, while one made
    after the start, at any depth, is removed."""
    import time

    uid = 0x78000000 + 8
    root = Path(tempfile.mkdtemp(prefix="arena-sweep-"))
    try:
        root.chmod(0o755)
        old, new = root / "old", root / "old" / "open"
        new.mkdir(parents=True)
        for p in (old, new):
            p.chmod(0o777)
        planted = old / "planted"
        planted.write_text("x")
        os.chown(planted, uid, uid)
        past = time.time() - 3600
        os.utime(old, (past, past))
        started = time.time()
        made = new / "made"
        made.write_text("y")
        os.chown(made, uid, uid)
        os.utime(old, (past, past))
        sweep_files(uid, (str(root),), since=started)
        assert not made.exists(), "made after the start, in a folder of an unchanged one: removed"
        assert planted.exists(), "a folder unchanged since the start is not listed"
        sweep_files(uid, (str(root),))
        assert not planted.exists(), "without a start, every folder is listed"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_closed_sockets_folder_refuses_an_attacks_rename(tmp_path: Path) -> None:
    session = Path(tempfile.mkdtemp(prefix="arena-session-"))
    try:
        session.chmod(0o777)
        (session / "sockets").mkdir()
        (session / "sockets").chmod(0o777)
        (session / "sockets" / "raylet").write_text("")
        close_sockets(str(session))
        assert stat.S_IMODE((session / "sockets").stat().st_mode) == 0o755
        moved = _as_user(0x78000000 + 9, lambda: os.rename(session / "sockets" / "raylet", session / "moved"))
        assert moved == 0 and (session / "sockets" / "raylet").exists(), "the rename failed"
    finally:
        shutil.rmtree(session, ignore_errors=True)


if sys.platform != "linux":  # pragma: no cover
    pytestmark.append(pytest.mark.skip(reason="Linux only"))
