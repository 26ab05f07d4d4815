"""Cheating attacks, written as a hostile plugin author would, against the public API and the interpreter.

Each tries one route to the challenger's secret (which challenge points are members, or the reconstruction
targets). When a route yields the secret the attack returns it as its guess (AUC 1, or exact targets); when the
route comes back empty the guess carries no information (constant scores, AUC 0.5; D⁻'s mean as every
reconstruction); when the route is blocked the exception goes up and fails the matchup. The tests run each
in-process (where it would succeed) and through the tournament (where it must not).

The module is self-contained (it is also installed as a plugin distribution for the tournament tests).
"""

from __future__ import annotations

import functools
import gc
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from arena import Attack, MembershipGuess, ReconstructionGuess, derive_seed, hookimpl
from arena.engine.seeds import permutation

RUN_DIR_HINT = "CHEAT_RUN_DIR"
"""An environment variable the tests set to the run directory: the path an attacker could learn (argv, docs)."""
SCENARIO_SEEDS = range(1000)


@functools.lru_cache(maxsize=1)
def digits() -> tuple[np.ndarray, np.ndarray]:
    """The public digits data exactly as the arena's loader scales it (loaded once: a brute force tries thousands
    of seeds against it)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)


def membership_from_seed(view, seed: int) -> np.ndarray | None:
    """The membership of ``view``'s challenge points, if the game's seed is ``seed`` (checked against the view)."""
    X, y = digits()
    m = view.train_size
    order = permutation(len(y), "membership-split", seed)
    pairs = order[: 2 * m]
    pairs = pairs[np.argsort(y[pairs], kind="stable")]
    challenge = np.concatenate([pairs[0::2], pairs[1::2]])
    shuffle = permutation(2 * m, "membership-challenge", seed)
    if not np.array_equal(X[challenge[shuffle]], view.challenge_X.reshape(2 * m, -1).numpy()):
        return None
    return (shuffle < m).astype(np.float64)


def membership_from_secret(view, secret: bytes) -> np.ndarray | None:
    """With the run's secret, the scenario seed is a small number: try them."""
    from arena.pipeline.store import challenger_seed

    for s in SCENARIO_SEEDS:
        seed = challenger_seed(secret, s)
        if derive_seed(seed, "shadow-pool") == view.pool_seed:
            return membership_from_seed(view, seed)
    return None


def guess(view, scores: np.ndarray | None) -> MembershipGuess:
    """The found membership as a guess, or a guess without information when nothing was found."""
    if scores is None:
        scores = np.zeros(len(view.challenge_y))
    return MembershipGuess(scores=scores, decisions=scores > 0.5)


class Cheat(Attack):
    game = "membership"
    threat_model = frozenset({"query"})


class SeedBruteForce(Cheat):
    """``pool_seed`` is a hash of the game's seed: hash small seeds until one matches, then rebuild the split."""

    name = "cheat-seed-bruteforce"

    def run(self, view):
        for s in range(200_000):
            if derive_seed(s, "shadow-pool") == view.pool_seed:
                return guess(view, membership_from_seed(view, s))
        return guess(view, None)


class SplitRebuild(Cheat):
    """No seed at all: rebuild the split from the public data for seeds 0, 1, … until it gives the challenge."""

    name = "cheat-split-rebuild"

    def run(self, view):
        for s in range(3000):
            if (found := membership_from_seed(view, s)) is not None:
                return guess(view, found)
        return guess(view, None)


def secret_from_run_dir(run: Path) -> bytes:
    return bytes.fromhex((run / ".arena-secret").read_text().strip())


def membership_from_run_dir(view, run: Path) -> np.ndarray | None:
    """Saved arrays of earlier matchups on the same challenge, else the run's secret."""
    from safetensors.torch import load_file

    X, _ = digits()
    rows = {X[i].tobytes(): i for i in range(len(X))}
    records = [rows.get(x.tobytes()) for x in view.challenge_X.reshape(len(view.challenge_y), -1).numpy()]
    for path in sorted((run / "artifacts").glob("*/arrays.safetensors")):
        arrays = load_file(str(path))
        if "is_member" in arrays and "record" in arrays:
            known = dict(zip(arrays["record"].tolist(), arrays["is_member"].tolist()))
            if all(r in known for r in records):
                return np.array([known[r] for r in records], dtype=np.float64)
    return membership_from_secret(view, secret_from_run_dir(run))


class CachePath(Cheat):
    """The granted training procedure leads to its cache, the cache to the run directory."""

    name = "cheat-cache-path"
    threat_model = frozenset({"query", "training"})

    def run(self, view):
        return guess(view, membership_from_run_dir(view, Path(view.train.cache.root).parent))


class StackFrame(Cheat):
    """The game called us: its frame is below ours, holding the secret."""

    name = "cheat-stack-frame"

    def run(self, view):
        frame = sys._getframe()
        while frame is not None:
            owner = frame.f_locals.get("self")
            if hasattr(owner, "_is_member"):
                return guess(view, owner._is_member.astype(np.float64))
            frame = frame.f_back
        return guess(view, None)


class GcWalk(Cheat):
    """Every object of the interpreter is one ``gc.get_objects()`` away: a game, or a run store and its secret."""

    name = "cheat-gc"

    def run(self, view):
        for obj in gc.get_objects():
            if type(obj).__name__ == "MembershipGame" and len(obj.challenge) == len(view.challenge_y):
                return guess(view, obj._is_member.astype(np.float64))
        for obj in gc.get_objects():
            if type(obj).__name__ == "RunStore":
                return guess(view, membership_from_secret(view, obj.secret()))
        return guess(view, None)


class ParamsPeek(Cheat):
    """Query access only, but the released parameters sit behind the query interface: a loss attack on them."""

    name = "cheat-params-peek"

    def run(self, view):
        models = view.model._models
        loss = models.loss(view.challenge_X, view.challenge_y)[0].numpy().astype(np.float64)
        return MembershipGuess(scores=-loss, decisions=-loss > np.median(-loss))


def ancestors() -> list[int]:
    """Our parent, its parent, … up to (not including) init: the arena is one of them (the parent itself, or the
    parent of the fork server that forked us)."""
    pids, pid = [], os.getppid()
    while pid > 1 and pid not in pids:
        pids.append(pid)
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    return pids


def memory_regions(pid: int, perms: str, largest: int) -> Iterator[bytes]:
    """The bytes of each mapping of process ``pid`` whose permissions start with ``perms`` and that spans at most
    ``largest`` bytes (unreadable ones skipped)."""
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            span, flags = line.split()[:2]
            lo, hi = (int(x, 16) for x in span.split("-"))
            if not flags.startswith(perms) or hi - lo > largest:
                continue
            try:
                mem.seek(lo)
                yield mem.read(hi - lo)
            except OSError:
                continue


def each_ancestor(fn):
    """``fn(pid)`` for each ancestor until one gives something; the last ``PermissionError`` if all refused."""
    refused = None
    for pid in ancestors():
        try:
            found = fn(pid)
        except PermissionError as exc:
            refused = exc
            continue
        if found is not None:
            return found
    if refused is not None:
        raise refused
    return None


class EnvironmentSecret(Cheat):
    """The run secret may be in the environment (ARENA_RUN_SECRET), ours or an ancestor's (the arena's)."""

    name = "cheat-env-secret"

    def run(self, view):
        def from_environ(pid: int) -> str | None:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            return next((e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"ARENA_RUN_SECRET=")), None)

        text = os.environ.get("ARENA_RUN_SECRET") or each_ancestor(from_environ)
        if text is None:
            return guess(view, None)
        return guess(view, membership_from_secret(view, bytes.fromhex(text)))


class ParentMemory(Cheat):
    """Read the memory of the arena's process (an ancestor) through /proc and search it for the run secret's hex
    form."""

    name = "cheat-parent-memory"

    def run(self, view):
        import re

        def from_memory(pid: int) -> np.ndarray | None:
            for chunk in memory_regions(pid, "r", 1 << 28):
                for hit in re.finditer(rb"[0-9a-f]{64}", chunk):
                    found = membership_from_secret(view, bytes.fromhex(hit.group().decode()))
                    if found is not None:
                        return found
            return None

        return guess(view, each_ancestor(from_memory))


class RunDirectory(Cheat):
    """The run directory's path is no secret (argv, the working directory, the docs): open it."""

    name = "cheat-run-dir"

    def run(self, view):
        candidates = [os.environ.get(RUN_DIR_HINT), os.getcwd()]
        for pid in ancestors():  # the arena's among them
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                candidates += [a.decode(errors="replace") for a in f.read().split(b"\0")]
        for c in filter(None, candidates):
            if (Path(c) / ".arena-run").exists() or (Path(c) / ".arena-secret").exists():
                return guess(view, membership_from_run_dir(view, Path(c)))
        raise PermissionError(f"no run directory readable among {candidates}")


# --- reconstruction ---


class ReconstructionSeed(Attack):
    """The reconstruction split from the public data, trying seeds until D⁻ matches: the targets follow."""

    name = "cheat-recon-seed"
    game = "reconstruction"
    threat_model = frozenset({"fixed-set"})

    def run(self, view):
        X, y = digits()
        f, t = len(view.fixed_y), view.n_targets
        fixed = view.fixed_X.numpy()
        for s in range(3000):
            order = permutation(len(y), "reconstruction-split", s)
            if np.array_equal(X[order[:f]], fixed):
                return ReconstructionGuess(records=X[order[f : f + t]], labels=y[order[f : f + t]])
        return ReconstructionGuess(records=np.repeat(fixed.mean(0, keepdims=True), t, 0))


class ReconstructionGc(Attack):
    """The reconstruction game in memory holds the targets."""

    name = "cheat-recon-gc"
    game = "reconstruction"
    threat_model = frozenset({"fixed-set"})

    def run(self, view):
        fixed = view.fixed_X.numpy()
        for obj in gc.get_objects():
            if type(obj).__name__ == "ReconstructionGame" and np.array_equal(obj.dataset.X[obj.fixed], fixed):
                return ReconstructionGuess(records=obj.dataset.X[obj.targets], labels=obj.dataset.y[obj.targets])
        return ReconstructionGuess(records=np.repeat(fixed.mean(0, keepdims=True), view.n_targets, 0))


MEMBERSHIP = (SeedBruteForce, SplitRebuild, CachePath, StackFrame, GcWalk, ParamsPeek, EnvironmentSecret,
              ParentMemory, RunDirectory)
RECONSTRUCTION = (ReconstructionSeed, ReconstructionGc)


@hookimpl
def register_attacks(register):
    for cls in (*MEMBERSHIP, *RECONSTRUCTION):
        register(cls)

