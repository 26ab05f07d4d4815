"""Hostile attacks, written as a plugin author would against the public API, each trying one route around the
sandbox: into the arena's process (pickling hooks, descriptors, ``__init__``), past its threat model, into other
matchups (patched scoring, daemons, signals, fork bombs, file descriptors), at the arena's resources (huge queries
and training requests, the shared cache) and at its output (escape sequences, huge text, its standard streams).

Each returns a guess without information (constant scores: AUC 0.5) unless its route yields the membership, in
which case it returns that (AUC 1). What each process observed is written into ``$HOSTILE_DIR`` (a directory
the tests create, writable by any user), for the tests to read. The module is self-contained: it is installed
as a plugin distribution (``arena_hostile``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time

import numpy as np
import torch

from arena import Attack, MembershipGame, MembershipGuess, hookimpl

HINT = "HOSTILE_DIR"
STASH = "HOSTILE_STASH"


def note(name: str, value: object) -> None:
    """Record what this process saw, as ``$HOSTILE_DIR/<name>.<pid>.json``."""
    folder = os.environ.get(HINT)
    if folder:
        with contextlib.suppress(OSError), open(os.path.join(folder, f"{name}.{os.getpid()}.json"), "w") as f:
            json.dump(value, f)


def blank(view) -> MembershipGuess:
    n = len(view.challenge_y)
    return MembershipGuess(scores=np.zeros(n), decisions=np.zeros(n, dtype=bool))


def membership_from_frames() -> list[float] | None:
    """The membership of the challenge points, from any frame on the stack that holds a membership game."""
    frame = sys._getframe()
    while frame is not None:
        for value in list(frame.f_locals.values()):
            member = getattr(value, "_is_member", None) if isinstance(value, MembershipGame) else None
            if member is not None:
                return [float(m) for m in member]
        frame = frame.f_back
    return None


def stashed_or_blank(view) -> MembershipGuess:
    """What a hook stashed (in this process's environment), else no information."""
    found = os.environ.get(STASH)
    if found:
        scores = np.array(json.loads(found))
        return MembershipGuess(scores=scores, decisions=scores > 0.5)
    return blank(view)


def stash() -> None:
    found = membership_from_frames()
    if found is not None:
        os.environ[STASH] = json.dumps(found)


class Hostile(Attack):
    game = "membership"
    threat_model = frozenset({"query"})


class PickleHook(Hostile):
    """``__getstate__`` and ``__reduce__`` read the game from the caller's frames (when the arena pickled the
    attack for its process, the game was on the stack)."""

    name = "hostile-pickle-hook"

    def __getstate__(self):
        stash()
        return self.__dict__

    def __reduce__(self):
        stash()
        return (type(self), (self.params,))

    def run(self, view):
        return stashed_or_blank(view)


class _Sneaky:
    """A ``name`` that reads the game as ``self`` is read (when the view asked for ``attack.name``)."""

    def __get__(self, obj, owner):
        if obj is not None:
            stash()
        return "hostile-name"


class NameDescriptor(Hostile):
    name = _Sneaky()

    def run(self, view):
        return stashed_or_blank(view)


class ThreatSet(Hostile):
    """A mutable ``threat_model`` (a set the attack could widen after validation)."""

    name = "hostile-threat-set"
    threat_model = {"labels"}

    def run(self, view):
        return blank(view)


class InitPatch(Hostile):
    """``__init__`` patches the game class: its ``score`` says AUC 1, its ``view`` adds the membership."""

    name = "hostile-init-patch"

    def __init__(self, params) -> None:
        super().__init__(params)
        original = MembershipGame.view

        def view(game, attack, release, procedure):
            os.environ[STASH] = json.dumps([float(m) for m in game._is_member])
            return original(game, attack, release, procedure)

        MembershipGame.view = view
        note("init-patch", {"patched": True})

    def run(self, view):
        return stashed_or_blank(view)


class Widen(Hostile):
    """Declares label-only, widens its threat model in ``__init__``, then scores by loss."""

    name = "hostile-widen"
    threat_model = frozenset({"labels"})

    def __init__(self, params) -> None:
        super().__init__(params)
        self.threat_model = frozenset({"query", "labels", "parameters", "population", "training"})

    def run(self, view):
        scores = -view.model.loss(view.challenge_X, view.challenge_y).double().numpy()
        return MembershipGuess(scores=scores, decisions=scores > np.median(scores))


class ScorePatch(Hostile):
    """Patches the game's scoring in its process, for every later matchup of a reused worker: noise."""

    name = "hostile-score-patch"

    def run(self, view):
        import arena.games.membership.metrics as metrics

        rng = np.random.default_rng(0)
        original = MembershipGame.score

        def noisy(game, attack, guess):
            return original(game, attack, MembershipGuess(scores=rng.random(len(game.challenge)),
                                                          decisions=guess.decisions))

        MembershipGame.score = noisy
        metrics.membership_metrics = lambda *a, **k: ({"auc": 0.0}, [])
        return blank(view)


class Daemon(Hostile):
    """A ``setsid`` grandchild that outlives its matchup and kills every process it may, and the arena's."""

    name = "hostile-daemon"

    def run(self, view):
        r, w = os.pipe()
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.write(w, str(os.getpid()).encode())
                os.close(w)
                time.sleep(1.0)  # let its own matchup finish: the next ones are the target
                while True:
                    with contextlib.suppress(OSError):
                        os.kill(-1, signal.SIGKILL)
                    for pid in _pythons():
                        with contextlib.suppress(OSError):
                            os.kill(pid, signal.SIGKILL)
                    time.sleep(0.05)
            os._exit(0)
        os.close(w)
        note("daemon", {"pid": int(os.read(r, 32)), "uid": os.getuid()})
        return blank(view)


def _pythons() -> list[int]:
    """Pids of the other python processes on the machine."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            with contextlib.suppress(OSError), open(f"/proc/{entry}/cmdline", "rb") as f:
                if b"python" in f.read():
                    found.append(int(entry))
    return found


class Stopper(Hostile):
    """SIGSTOPs every other python process: sibling attacks, the fork server, the arena."""

    name = "hostile-stop"

    def run(self, view):
        stopped, refused = [], 0
        for pid in _pythons():
            try:
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
            except OSError:
                refused += 1
        time.sleep(0.5)
        for pid in stopped:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)
        note("stop", {"stopped": stopped, "refused": refused, "uid": os.getuid()})
        return blank(view)


class ForkBomb(Hostile):
    """Forks until refused; every child sleeps (and would outlive the matchup)."""

    name = "hostile-fork-bomb"

    def run(self, view):
        forked = 0
        error = None
        while forked < 5000:
            try:
                pid = os.fork()
            except OSError as exc:
                error = str(exc)
                break
            if pid == 0:
                time.sleep(600)
                os._exit(0)
            forked += 1
        note("fork-bomb", {"forked": forked, "error": error})
        return blank(view)


class QueryFlood(Hostile):
    """One query of two million rows (which, answered, would take the arena's memory)."""

    name = "hostile-query-flood"

    def run(self, view):
        X = torch.zeros((2_000_000, *view.input_shape), dtype=torch.uint8)
        view.model.predict_proba(X)
        return blank(view)


class TrainFlood(Hostile):
    """One training call of 64 models on 20,000 records each."""

    name = "hostile-train-flood"
    threat_model = frozenset({"query", "training"})

    def run(self, view):
        k, n = 64, 20_000
        X = torch.zeros((k, n, *view.input_shape), dtype=torch.uint8)
        y = torch.zeros((k, n), dtype=torch.int64)
        view.train(X, y, list(range(k)), list(range(k)))
        return blank(view)


class CacheFlood(Hostile):
    """Many small training calls, each a new entry of the run's shared cache."""

    name = "hostile-cache-flood"
    threat_model = frozenset({"query", "population", "training"})

    def run(self, view):
        k, n = 8, 20
        X = view.population_X[:n].expand(k, *view.population_X[:n].shape).contiguous()
        y = view.population_y[:n].expand(k, n).contiguous()
        calls = 0
        for i in range(30):
            view.train(X, y, [i * k + j for j in range(k)], [i * k + j for j in range(k)])
            calls += 1
        note("cache-flood", {"calls": calls})
        return blank(view)


ESCAPES = "\x1b]0;pwned\x07\x1b]52;c;cHduZWQ=\x07\x1b[2J\x1b[H\r18 matchups: 18 ok\u202e"


class Output(Hostile):
    """Truncates the arena's log through its standard streams, writes escape sequences and megabytes to them,
    and fails with a 20 MB error full of escapes."""

    name = "hostile-output"

    def run(self, view):
        for fd in (1, 2):
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
        print(ESCAPES, flush=True)
        sys.stdout.write("O" * 3_000_000 + "\n")
        sys.stderr.write(ESCAPES * 1000 + "\n")
        sys.stdout.flush()
        sys.stderr.flush()
        raise ValueError(ESCAPES + "E" * 20_000_000)


class FdTricks(Hostile):
    """Looks through every descriptor it holds for one of the arena's (the run directory's files, the fork
    server's socket, another attack's pipe) and writes to each that is not its own standard stream or pipe."""

    name = "hostile-fd-tricks"

    def run(self, view):
        held, wrote = {}, []
        for fd in sorted(int(n) for n in os.listdir("/proc/self/fd")):
            try:
                held[fd] = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
        for fd, target in held.items():
            if fd > 2 and not target.startswith("/") and fd != _conn_fd():
                with contextlib.suppress(OSError):
                    os.write(fd, b"\0" * 64)
                    wrote.append(target)
        note("fd-tricks", {"held": held, "wrote": wrote})
        return blank(view)


def _conn_fd() -> int:
    """The descriptor of this attack's own pipe to the arena (its proxies hold it)."""
    import gc
    from multiprocessing.connection import Connection

    return next((c.fileno() for c in gc.get_objects() if isinstance(c, Connection) and not c.closed), -1)


class SlowFirst(Hostile):
    """Honest but slow on its first try (the test kills the fork server under it), quick on the next."""

    name = "hostile-slow-first"

    def run(self, view):
        folder = os.environ.get(HINT, "")
        first = not any(n.startswith("slow-first.") for n in os.listdir(folder))
        note("slow-first", {"first": first})
        if first:
            time.sleep(120)
        return blank(view)


ALL = (PickleHook, InitPatch, Widen, ScorePatch, Daemon, Stopper, ForkBomb, QueryFlood, TrainFlood, CacheFlood,
       Output, FdTricks)
UNPLANNABLE = (NameDescriptor, ThreatSet)


@hookimpl
def register_attacks(register) -> None:
    for cls in (*ALL, *UNPLANNABLE, SlowFirst):
        register(cls)
