"""arena.pipeline.sandbox.server: the attacks' processes come from a fork server holding no secret, or from a fresh
interpreter each, equally isolated."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from arena.contracts.attack import Attack
from arena.games.membership.guess import MembershipGuess
from arena.pipeline.sandbox import SECRET_ENV, run_attack
from tests.pipeline.sandbox.test_sandbox import ROOT_ONLY, Probe, view_of

FORK_SERVER = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux's")


class Parent(Attack):
    """Reports its parent's pid."""

    name = "parent"

    def run(self, view):
        return MembershipGuess(scores=np.array([float(os.getppid())]), decisions=np.zeros(1, dtype=bool))


def _parent_of_an_attack(queue) -> None:
    a = Parent
    queue.put(int(run_attack(a, view_of(a)).scores[0]))


@FORK_SERVER
def test_the_fork_server_is_exec_d_without_the_secret_and_holds_none(monkeypatch) -> None:
    from arena.pipeline.sandbox import server as fork_server

    secret = "cd" * 32
    monkeypatch.setenv(SECRET_ENV, secret)
    a = Parent
    parent = int(run_attack(a, view_of(a)).scores[0])
    server = fork_server._server.process.pid
    assert parent == server, "the attack's process is the fork server's child, not the arena's"
    assert os.readlink(f"/proc/{server}/exe") == os.path.realpath(sys.executable), "a fresh interpreter (exec)"
    assert Path(f"/proc/{server}/cwd").resolve() == Path("/")
    environ = Path(f"/proc/{server}/environ").read_bytes().split(b"\0")
    assert not any(e.startswith(SECRET_ENV.encode() + b"=") for e in environ)
    from tests.cheaters import memory_regions
    from tests.conftest import TEST_SECRET

    scanned = 0
    for chunk in memory_regions(server, "rw", 1 << 30):
        scanned += len(chunk)
        assert secret.encode() not in chunk and TEST_SECRET.encode() not in chunk, "a run secret in its memory"
    assert scanned > 1 << 20, "its memory was read"


@FORK_SERVER
def test_processes_forked_from_the_arena_share_its_fork_server() -> None:
    import multiprocessing

    from arena.pipeline import sandbox
    from arena.pipeline.sandbox import server as fork_server

    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_parent_of_an_attack, args=(queue,))
    sandbox.start()  # as the serial tournament does before its first matchup
    child.start()
    parent = queue.get(timeout=120)
    child.join(30)
    assert child.exitcode == 0
    assert parent == fork_server._server.process.pid, "a serial matchup's attack comes from its parent's fork server"


@pytest.mark.slow
@ROOT_ONLY
def test_without_the_fork_server_each_attack_gets_a_fresh_interpreter_as_isolated(monkeypatch) -> None:
    run = Path(tempfile.mkdtemp())
    monkeypatch.chdir(run)
    monkeypatch.setenv("PROBE_DIR", str(run))
    monkeypatch.setenv(SECRET_ENV, "ab" * 32)
    monkeypatch.setenv("ARENA_SANDBOX_EXEC", "1")
    a = Parent
    assert int(run_attack(a, view_of(a)).scores[0]) == os.getpid(), "exec'd by the arena itself"
    facts = run_attack(Probe, view_of(Probe)).scores
    assert list(facts[[0, 1, 2, 3, 4, 6]]) == [1.0, 0.0, 0.0, 0.0, 1.0, 0.0] and facts[5] <= 16
    shutil.rmtree(run, ignore_errors=True)
