"""arena.pipeline.sandbox: the attack's process holds its view alone; answers are data; its failures are its own."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import pytest
import torch

from arena.contracts.attack import Attack
from arena.contracts.release import BlackBox, LabelOnly
from arena.contracts.view import Grant, View, view_items
from arena.engine.recipe import Recipe
from arena.games.membership.guess import MembershipGuess
from arena.pipeline.procedure import TrainingProcedure
from arena.pipeline.sandbox import SECRET_ENV, AttackFailed, AttackProcess, run_attack
from arena.pipeline.store import TensorCache
from arena_plugins.defenses import NonPrivate
from tests.conftest import architecture, shared_dir

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="the user change needs root (README, Reliability)")


class Probe(Attack):
    """Reports what its process can see, as the scores of a guess (1.0 = yes)."""

    name = "probe"

    def run(self, view):
        def can(fn) -> float:
            try:
                fn()
            except OSError:
                return 0.0
            return 1.0

        facts = [
            float(os.geteuid() != 0),
            can(lambda: os.listdir(os.environ["PROBE_DIR"])),
            float(SECRET_ENV in os.environ),
            can(lambda: open(f"/proc/{os.getppid()}/environ", "rb").read()),  # noqa: SIM115 - probes open() itself
            float(os.getcwd() == "/"),
            float(len(os.listdir("/proc/self/fd"))),
            can(lambda: os.kill(os.getppid(), 0)),
        ]
        return MembershipGuess(scores=np.array(facts), decisions=np.zeros(len(facts), dtype=bool))


class Queries(Attack):
    name = "queries"
    threat_model = frozenset({"query", "labels", "training"})

    def run(self, view):
        X = view.X
        p = view.model.predict_proba(X)
        logp = view.model.log_proba(X)
        loss = view.model.loss(X, view.y)
        labels = view.labels_model.predict(X)
        models, _ = view.train(X[None], view.y[None], [1], [2])
        (chunk,) = view.train.train_chunks([(X[None], view.y[None], torch.tensor([1]), torch.tensor([2]))])
        mine = models.predict_proba(X)[0]
        scores = torch.cat([p.reshape(-1), logp.reshape(-1), loss, labels.double(), mine.reshape(-1),
                            chunk.predict_proba(X)[0].reshape(-1), torch.tensor([view.train.chunk])])
        return MembershipGuess(scores=scores.numpy(), decisions=np.ones(3, dtype=bool))


class Peek(Attack):
    name = "peek"

    def run(self, view):
        return view.model._models


class Exits(Attack):
    name = "exits"

    def run(self, view):
        sys.exit(view.how)


class HardExit(Attack):
    name = "hard-exit"

    def run(self, view):
        os._exit(3)


class Raises(Attack):
    name = "raises"

    def run(self, view):
        raise ValueError("no luck")


class Sleeps(Attack):
    name = "sleeps"

    def run(self, view):
        Path(view.pidfile).write_text(str(os.getpid()))
        while True:
            try:
                time.sleep(0.05)
            except BaseException:  # noqa: BLE001 - the hostile kind
                pass


class Forger(Attack):
    """Sends the arena a pickle that would run a command if it were unpickled."""

    name = "forger"

    def run(self, view):
        import gc
        import pickle
        from multiprocessing.connection import Connection

        class Boom:
            def __reduce__(self):
                return (os.system, (f"touch {view.marker}",))

        conn = next(o for o in gc.get_objects() if isinstance(o, Connection))
        conn.send_bytes(pickle.dumps(Boom()))
        time.sleep(5)


@dataclasses.dataclass(frozen=True)
class PerModel:
    scores: dict[str, np.ndarray]
    note: str | None = None


class Several(Attack):
    name = "several"

    def run(self, view):
        return PerModel({f"m{i}": m.predict_proba(view.X).numpy() for i, m in enumerate(view.models)}, "two")


class NotAGuess(Attack):
    name = "not-a-guess"

    def run(self, view):
        return {"scores": [1, 2]}


@pytest.fixture(scope="module")
def released(tmp_path_factory) -> tuple[TrainingProcedure, BlackBox, LabelOnly, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    X, y = torch.rand(20, 4, generator=g), torch.randint(0, 3, (20,), generator=g)
    proc = TrainingProcedure(NonPrivate(NonPrivate.Params()), architecture("logreg", 4, 3, l2=1e-2),
                             Recipe(epochs=1, lr=0.1, batch_size=8), cache=TensorCache(tmp_path_factory.mktemp("c")))
    models, _ = proc(X[None], y[None], [7], [8])
    return proc, BlackBox(models), LabelOnly(models), X, y


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory the attack's process may write (pytest's own temporary directories are root's alone)."""
    path = shared_dir("arena-shared-")  # outside the scratch roots, whose files of an attack's user are swept
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Items(View):
    """The items the attacks above read, given to every attack (None where a test gives none)."""

    how: Any
    pidfile: Any
    marker: Any
    store: Any


class QueriesView(View):
    X: torch.Tensor
    y: torch.Tensor
    model: Annotated[BlackBox, Grant("query")]
    labels_model: Annotated[LabelOnly, Grant("labels")]
    train: Annotated[TrainingProcedure, Grant("training")]


class SeveralView(View):
    X: torch.Tensor
    models: Annotated[list, Grant("query")]


class PeekView(View):
    model: Annotated[BlackBox, Grant("query")]


def view_of(attack: Attack, **common) -> View:
    return Items(attack.name, attack.threat_model, {**dict.fromkeys(view_items(Items)), **common})


@pytest.mark.slow
@ROOT_ONLY
def test_the_attacks_process_is_nobody_without_the_secret_the_run_directory_or_the_parent(monkeypatch) -> None:
    run = Path(tempfile.mkdtemp())  # mode 0700, as a run directory; /tmp lets anyone traverse
    (run / "is_member").write_text("1 0 1")
    monkeypatch.chdir(run)
    monkeypatch.setenv("PROBE_DIR", str(run))
    monkeypatch.setenv(SECRET_ENV, "ab" * 32)
    facts = run_attack(Probe, view_of(Probe)).scores
    not_root, lists_run, has_secret, reads_parent_env, at_root_dir, fds, signals_parent = facts
    assert not_root == 1.0, "the attack runs as nobody"
    assert lists_run == 0.0, "the run directory is not readable"
    assert has_secret == 0.0, "ARENA_RUN_SECRET is not in the attack's environment"
    assert reads_parent_env == 0.0, "the arena's environment is another user's"
    assert at_root_dir == 1.0
    assert signals_parent == 0.0, "the attack cannot signal the arena"
    assert fds <= 16, "no descriptor of the arena's but the pipe, the standard streams and import directories"


def test_queries_labels_and_training_are_answered_by_the_arena(released) -> None:
    proc, box, labels, X, y = released
    attack = Queries
    view = QueriesView(attack.name, attack.threat_model,
                       {"X": X, "y": y, "model": box, "labels_model": labels, "train": proc})
    in_process = Queries(Queries.Params()).run(view).scores
    assert np.array_equal(run_attack(attack, view).scores, in_process), "the same answers as in-process"


def test_interfaces_inside_lists_and_guesses_with_dicts_of_arrays(released) -> None:
    _, box, _, X, _ = released
    attack = Several
    view = SeveralView(attack.name, attack.threat_model, {"X": X, "models": [box, box]})
    guess = run_attack(attack, view, guesses=(PerModel,))
    assert guess.note == "two" and sorted(guess.scores) == ["m0", "m1"]
    assert np.array_equal(guess.scores["m1"], box.predict_proba(X).numpy())


def test_the_query_interface_has_no_parameters_behind_it(released) -> None:
    _, box, *_ = released
    view = PeekView("peek", frozenset({"query"}), {"model": box})
    with pytest.raises(AttackFailed, match=r"^ThreatModelError: QueryProxy answers predict_proba, log_proba, "
                                           r"loss only, not '_models'"):
        run_attack(Peek, view)


@pytest.mark.parametrize(("attack", "how", "message"), [
    (Exits, 0, r"^plugin raised SystemExit: 0$"),
    (Exits, "bye", r"^plugin raised SystemExit: bye$"),
    (HardExit, None, r"^worker died: exit code 3$"),
    (Raises, None, r"^ValueError: no luck$"),
    (NotAGuess, None, r"returned dict, not one of CanaryGuess, GradientsGuess, MembershipGuess, ReconstructionGuess$"),
])
def test_exits_and_exceptions_in_the_attack_are_its_failure(attack, how, message) -> None:
    a = attack
    with pytest.raises(AttackFailed, match=message) as info:
        run_attack(a, view_of(a, how=how))
    if attack is Raises:
        assert "in run" in info.value.child_traceback and "ValueError: no luck" in info.value.child_traceback


@pytest.mark.slow
def test_a_timeout_kills_an_attack_that_catches_everything(shared: Path) -> None:
    """The clock is set once the attack is built (its process started, which a loaded machine may take long to
    do), so the timeout falls while ``run`` loops; the bound after it is generous but finite: a broken timeout
    never ends."""
    a = Sleeps
    pidfile = shared / "pid"
    with AttackProcess(a) as process, pytest.raises(AttackFailed, match="timeout"):
        process.skip_reason()  # built and waiting for its view
        t0 = time.monotonic()
        process.deadline = t0 + 5
        process.run(view_of(a, pidfile=str(pidfile)))
    assert 5 <= time.monotonic() - t0 < 60
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_what_the_attack_sends_is_never_unpickled(shared: Path) -> None:
    a = Forger
    marker = shared / "pwned"
    with pytest.raises(AttackFailed, match="malformed message"):
        run_attack(a, view_of(a, marker=str(marker)))
    assert not marker.exists()


def test_a_view_item_the_sandbox_does_not_know_is_refused_before_anything_starts() -> None:
    a = Raises
    with pytest.raises(TypeError, match="view item 'store' \\(object\\) cannot be handed"):
        run_attack(a, view_of(a, store=object()))


@pytest.mark.subprocess
def test_the_attacks_process_dies_with_the_arena(shared: Path) -> None:
    pidfile = shared / "pid"
    script = textwrap.dedent(f"""
        from arena.pipeline.sandbox import run_attack
        from tests.pipeline.sandbox.test_sandbox import Sleeps, view_of
        a = Sleeps
        run_attack(a, view_of(a, pidfile={str(pidfile)!r}))
    """)
    arena = subprocess.Popen([sys.executable, "-c", script], cwd=Path(__file__).parents[3])
    deadline = time.monotonic() + 60
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline and arena.poll() is None
        time.sleep(0.1)
    os.kill(arena.pid, signal.SIGKILL)
    arena.wait()
    pid = int(pidfile.read_text())
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    pytest.fail("the attack's process outlived the arena")


# --- the attack built in its own process; its limits, its user, its quotas, its output ---


class Built(Attack):
    """Says where it was built and what its process is: pid, user, group, session, limits."""

    name = "built"

    def __init__(self, params) -> None:
        super().__init__(params)
        self.built_in = os.getpid()

    def skip_reason(self, track):
        return None if track == "fits" else f"not for {track} \x1b[2J"

    def run(self, view):
        import resource

        status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
        facts = [self.built_in, os.getpid(), os.getuid(), os.getpgid(0), os.getsid(0),
                 resource.getrlimit(resource.RLIMIT_NPROC)[0], resource.getrlimit(resource.RLIMIT_FSIZE)[0],
                 int(status["NoNewPrivs"])]
        print("built \x1b]0;title\x07 here")
        return MembershipGuess(scores=np.array(facts, dtype=np.float64), decisions=np.zeros(len(facts), dtype=bool))


class Chatty(Attack):
    """Returns a guess of a million scores, or queries many rows."""

    name = "chatty"
    threat_model = frozenset({"query"})

    def run(self, view):
        if "model" in dir(view):
            view.model.predict_proba(torch.zeros(10, 4))
        return MembershipGuess(scores=np.zeros(1_000_000), decisions=np.zeros(1, dtype=bool))


class ChattyView(View):
    model: Annotated[BlackBox, Grant("query")]


def test_the_attack_is_built_asked_and_run_in_its_own_process_group_and_user(capfd) -> None:
    from arena.pipeline.sandbox import AttackProcess, Limits

    with AttackProcess(Built, track="does not fit") as process:
        assert process.skip_reason() == "not for does not fit \\x1b[2J", "asked there, its text escaped"
    with AttackProcess(Built, track="fits") as process:
        assert process.skip_reason() is None
        facts = process.run(view_of(Built)).scores
    built_in, pid, uid, pgid, sid, nproc, fsize, no_new_privs = facts.astype(int)
    assert built_in == pid != os.getpid(), "built in the attack's process, not here"
    assert pgid == sid == pid, "a session and process group of its own"
    assert (nproc, fsize, no_new_privs) == (Limits().nproc, Limits().file_bytes, 1)
    if os.geteuid() == 0:
        assert uid == Limits.from_env().uid_base + pid, "a user of its own"
    assert "[built] built \\x1b]0;title\\x07 here" in capfd.readouterr().err, "its output relayed, escaped"


def test_messages_and_queries_over_their_quota_fail_the_attack(released) -> None:
    from arena.pipeline.sandbox import Limits

    _, box, *_ = released
    with pytest.raises(AttackFailed, match=r"^quota: attack 'chatty' sent a message over 100000 bytes"):
        run_attack(Chatty, ChattyView("chatty", frozenset(), {"model": box}), limits=Limits(message_bytes=100_000))
    with pytest.raises(AttackFailed, match=r"^quota: attack 'chatty' queried 10 rows at once, over the 5 one query"):
        run_attack(Chatty, ChattyView("chatty", frozenset({"query"}), {"model": box}), limits=Limits(query_rows=5))


class Counts(Attack):
    """Returns its process id and how many views it has answered in that process."""

    name = "counts"
    answered = 0

    def run(self, view):
        Counts.answered += 1
        return MembershipGuess(scores=np.array([float(os.getpid()), float(Counts.answered)]),
                               decisions=np.zeros(2, dtype=bool))


def test_one_process_answers_every_view_it_is_sent_and_a_new_process_starts_afresh() -> None:
    """A game that plays many targets (``Game.view_groups``) sends one process several views; the next group's
    process shares nothing with it."""
    a = Counts
    with AttackProcess(a) as process:
        first = [process.run(view_of(a)).scores for _ in range(3)]
    with AttackProcess(a) as process:
        second = process.run(view_of(a)).scores
    assert [s[1] for s in first] == [1.0, 2.0, 3.0] and len({s[0] for s in first}) == 1
    assert second[1] == 1.0 and second[0] != first[0][0]
