"""The run directory: results.jsonl (appended atomically, torn tail ignored, lines that are not rows of
``arena.pipeline.row`` set aside), a content-addressed tensor cache verified on every read, a marker saying the
directory is the arena's, and a lock held while a run uses it."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from arena._version import __version__
from arena.engine.seeds import challenger_seed as challenger_seed  # re-exported: the secret's seed, beside it
from arena.pipeline.files import RunDirError as RunDirError  # re-exported: the store's error
from arena.pipeline.files import _atomic_write as _atomic_write  # re-exported: the site's pages are written so too
from arena.pipeline.files import open_regular, warn
from arena.pipeline.row import row_problem
from arena.pipeline.rowvalues import value_problem
from arena.pipeline.tensorcache import TensorCache as TensorCache  # re-exported: the cache, beside its store
from arena.pipeline.tensorcache import tensor_digest as tensor_digest

RESULTS = "results.jsonl"
REJECTED = "results.rejected.jsonl"
MATCHUPS = "matchups.json"
"""The keys of the matchups of the scenario as last run (and how it labels them): which rows are current."""
MARKER = ".arena-run"
LOCK = ".arena-lock"
ORPHAN_SECONDS = 10.0
"""How long a run waits for a run directory whose lock outlives the arena that took it (a ``kill -9``): the lock
is shared with the processes that arena forked, which die with it (``PR_SET_PDEATHSIG``), not at the same instant."""
SECRET = ".arena-secret"
SECRET_ENV = "ARENA_RUN_SECRET"
SECRET_BYTES = 32

if TYPE_CHECKING:
    import torch


def content_key(obj: object) -> str:
    """Stable hash of a JSON-serialisable description (keys sorted)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def parse_secret(text: str, source: str) -> bytes:
    """32 bytes from 64 hexadecimal digits; ``RunDirError`` naming ``source`` otherwise."""
    text = text.strip()
    if len(text) != 2 * SECRET_BYTES or not all(c in "0123456789abcdefABCDEF" for c in text):
        raise RunDirError(f"{source}: a run secret is {2 * SECRET_BYTES} hexadecimal digits "
                          f"({SECRET_BYTES} bytes), got {len(text)} characters")
    return bytes.fromhex(text)


@dataclass
class ResultsFile:
    """results.jsonl read line by line: the rows, and the complete lines that are not rows (1-based numbers)."""

    rows: list[dict] = field(default_factory=list)
    rejected: list[tuple[int, str, bytes]] = field(default_factory=list)  # (line, why, the line's bytes)
    kept: list[bytes] = field(default_factory=list)  # the good lines, as written


def read_results(path: Path) -> ResultsFile:
    """Parse every complete line; a torn last line (a kill during a write) is neither a row nor an error."""
    out = ResultsFile()
    if not path.exists():
        return out
    with os.fdopen(open_regular(path, os.O_RDONLY), "rb") as f:
        lines = f.read().split(b"\n")[:-1]  # the part after the last newline is a torn tail, or empty
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            out.rejected.append((number, f"not JSON ({type(exc).__name__})", raw))
            continue
        problem = row_problem(obj) or value_problem(obj)
        if problem is None:
            out.rows.append(obj)
            out.kept.append(raw)
        else:
            out.rejected.append((number, problem, raw))
    return out


class RunStore:
    """One run directory: the scenario as run, results.jsonl, the cache and per-matchup artifacts."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.cache = TensorCache(self.root / "cache", self._entry_secret)
        self.artifacts = TensorCache(self.root / "artifacts", self._entry_secret)
        self._reported: set[int] = set()
        self._secret: bytes | None = None

    def secret(self) -> bytes:
        """The run's 32-byte secret, which keys every random choice of the challenger (``challenger_seed``).

        Drawn from ``os.urandom`` when the run directory gets its secret (or taken from ``ARENA_RUN_SECRET``, 64
        hex digits, to reproduce a run elsewhere), kept in ``RUN_DIR/.arena-secret`` (mode 0600, written
        atomically, never in results or reports) and read back on resume. The run directory is made mode 0700.
        Raises ``RunDirError`` for a malformed ``ARENA_RUN_SECRET`` or secret file, or one that differs from
        ``ARENA_RUN_SECRET``."""
        if self._secret is not None:
            return self._secret
        path = self.root / SECRET
        given = os.environ.get(SECRET_ENV)
        wanted = parse_secret(given, SECRET_ENV) if given is not None else None  # checked before any write
        if not path.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):  # a directory we may not chmod is still usable
                self.root.chmod(0o700)
            body = (wanted if wanted is not None else os.urandom(SECRET_BYTES)).hex() + "\n"
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=f"{SECRET}.", suffix=".tmp")  # mode 0600
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(body)
                    f.flush()
                    os.fsync(f.fileno())
                with contextlib.suppress(FileExistsError):  # another process made it first: theirs holds
                    os.link(tmp, path)
            finally:
                os.unlink(tmp)
        secret = parse_secret(path.read_text(encoding="ascii", errors="replace"), str(path))
        if wanted is not None and wanted != secret:
            raise RunDirError(f"{SECRET_ENV} differs from the secret of the existing run directory {self.root} "
                              f"({path}); unset it to resume this run, or choose another --out")
        self._secret = secret
        return secret

    def _entry_secret(self) -> bytes | None:
        """The secret authenticating cache and artifact entries; None for a directory that has none yet and no
        ``ARENA_RUN_SECRET`` (read-only commands never create one)."""
        if self._secret is None and not (self.root / SECRET).exists() and SECRET_ENV not in os.environ:
            return None
        return self.secret()

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the run directory for this process: a second run into it raises ``RunDirError`` naming the holder.
        The operating system releases the lock when the holder exits, however it exits; a holder that is gone while
        a process it forked still holds the lock (dying with it) is waited for, up to ``ORPHAN_SECONDS``."""
        path = self.root / LOCK
        handle = os.fdopen(open_regular(path, os.O_RDWR | os.O_CREAT), "r+")  # held for the whole run
        try:
            deadline = time.monotonic() + ORPHAN_SECONDS
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    handle.seek(0)
                    holder = handle.read().strip() or "unknown"
                    if _alive(holder) or time.monotonic() > deadline:
                        raise RunDirError(f"{self.root}: in use by another arena run (pid {holder}); wait for it "
                                          "to finish or choose another --out") from None
                    time.sleep(0.05)  # its run is gone; a process it forked is dying with it
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()}\n")
            handle.flush()
            yield
        finally:
            handle.close()

    def check_ours(self) -> None:
        """Refuse (``RunDirError``) a directory whose results.jsonl the arena did not write, before touching it.
        A directory with the arena's marker, without results.jsonl, or whose every line is a result row is ours."""
        if (self.root / MARKER).exists() or not self.results_path.exists():
            return
        read = read_results(self.results_path)
        if read.rejected:
            line, why, _ = read.rejected[0]
            raise RunDirError(f"{self.results_path}: not an arena results file (line {line}: {why}) and no "
                              f"{MARKER} marker; choose another --out")

    def mark(self) -> None:
        """Make sure the run's secret exists (``secret``), then write the marker that says this directory is an
        arena run directory (once)."""
        self.secret()
        if not (self.root / MARKER).exists():
            self.write_json(MARKER, {"arena": __version__})

    def set_aside(self) -> list[str]:
        """Move every line of results.jsonl that is not a result row to results.rejected.jsonl and rewrite
        results.jsonl with the rows alone (atomically), so nothing is ever appended after a bad line; return one
        message per line moved. Call with the run lock held."""
        read = read_results(self.results_path)
        if not read.rejected:
            return []
        fd = open_regular(self.root / REJECTED, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            for line, why, raw in read.rejected:
                f.write(json.dumps({"line": line, "reason": why, "text": raw.decode("utf-8", "replace")}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        body = b"".join(raw + b"\n" for raw in read.kept)
        _atomic_write(self.results_path, lambda tmp: Path(tmp).write_bytes(body))
        return [f"{self.results_path}: line {line}: {why}; moved to {REJECTED}" for line, why, _ in read.rejected]

    @property
    def results_path(self) -> Path:
        return self.root / RESULTS

    def artifact_dir(self, key: str) -> Path:
        return self.root / "artifacts" / key

    def save_arrays(self, key: str, arrays: dict[str, torch.Tensor]) -> None:
        """Keep one matchup's arrays (scores and membership, targets and reconstructions) outside the model cache,
        so nothing reachable from an attacker's training procedure holds another matchup's secret."""
        self.artifacts.put(key, "arrays", arrays)

    def load_arrays(self, key: str) -> dict[str, torch.Tensor] | None:
        return self.artifacts.get(key, "arrays")

    def read_arrays(self, key: str) -> dict[str, np.ndarray] | None:
        """``load_arrays`` as numpy arrays, without importing torch (what the audit and the report read)."""
        return self.artifacts.get_arrays(key, "arrays")

    def save_draws(self, key: str, draws: dict[str, np.ndarray]) -> None:
        """Keep one matchup's bootstrap draws of its metrics (drawn once, when it was scored) beside its arrays, so
        that a leaderboard reads them instead of resampling the scores again."""
        if draws:
            import torch

            self.artifacts.put(key, "bootstrap", {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float64))
                                                  for k, v in draws.items()})

    def load_draws(self, key: str) -> dict[str, np.ndarray] | None:
        """The bootstrap draws ``save_draws`` kept (metric → draws), None where the matchup saved none."""
        return self.artifacts.get_arrays(key, "bootstrap")

    def write_json(self, name: str, obj: object) -> None:
        text = json.dumps(obj, indent=2, sort_keys=True, default=str)
        _atomic_write(self.root / name, lambda tmp: Path(tmp).write_text(text))

    def write_text(self, name: str, text: str) -> None:
        _atomic_write(self.root / name, lambda tmp: Path(tmp).write_text(text))

    def append_result(self, row: dict) -> None:
        """Append one finished matchup as a single line, flushed and fsynced before returning. The file is opened
        once and never read but for its last byte (and, after a torn write, back to its last newline): an append
        costs the same however many rows precede it."""
        self.root.mkdir(parents=True, exist_ok=True)
        line = (json.dumps(row, sort_keys=True, default=str) + "\n").encode("utf-8")
        with os.fdopen(open_regular(self.results_path, os.O_RDWR | os.O_APPEND | os.O_CREAT), "r+b") as f:
            _repair_tail(f)
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def set_matchups(self, matchups: dict[str, dict]) -> None:
        """Record the matchups of the scenario as run (matchup key → its ``defense_label`` and ``attack_label``,
        and whatever else describes it), atomically, at the start of a run: from now on only rows of these keys
        are results (``current_rows``); every other row stays in results.jsonl as history."""
        self.write_json(MATCHUPS, {"arena": __version__, "matchups": matchups})

    def matchups(self) -> dict[str, dict] | None:
        """The matchups recorded by ``set_matchups``; None for a run directory written before the arena recorded
        them (all of its rows are then current)."""
        path = self.root / MATCHUPS
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RunDirError(f"{path}: unreadable ({type(exc).__name__}: {exc}); run the scenario again to "
                              "rewrite it") from None
        matchups = data.get("matchups") if isinstance(data, dict) else None
        if not isinstance(matchups, dict) or not all(isinstance(v, dict) for v in matchups.values()):
            raise RunDirError(f"{path}: not a record of matchups; run the scenario again to rewrite it")
        return matchups

    def latest_rows(self) -> list[dict]:
        """The last row written for each matchup key (a re-run replaces an earlier failure, ``--fresh`` every
        row), in the order the keys first appear."""
        by_key: dict[str, dict] = {}
        for row in self.results():
            by_key[row["key"]] = row
        return list(by_key.values())

    def current_rows(self) -> list[dict]:
        """The latest row of each matchup of the scenario as run, labelled as that scenario labels it (labels are
        no part of a key: a relabelled entry replays nothing): what the leaderboard, the report, the frame and
        the audit read. Rows of other keys (superseded: another version or source of a plugin, other
        parameters, another scenario) are left out."""
        matchups = self.matchups()
        rows = self.latest_rows()
        if matchups is None:
            return rows
        out = []
        for row in rows:
            entry = matchups.get(row["key"])
            if entry is not None:
                out.append({**row, **{k: entry[k] for k in ("defense_label", "attack_label") if k in entry}})
        return out

    def history_rows(self) -> list[dict]:
        """The latest row of every matchup key ever written, each with ``superseded``: False for the current
        matchups (``current_rows``, labelled as they are now), True for the others."""
        current = {r["key"]: r for r in self.current_rows()}
        return [{**current[r["key"]], "superseded": False} if r["key"] in current else {**r, "superseded": True}
                for r in self.latest_rows()]

    def results(self) -> list[dict]:
        """Every complete result row; a torn last line is ignored, and each line that is not a row is skipped
        with a warning naming its number (once per store)."""
        read = read_results(self.results_path)
        for line, why, _ in read.rejected:
            if line not in self._reported:
                self._reported.add(line)
                warn(f"{self.results_path}: line {line}: {why}; skipped")
        return read.rows


def _repair_tail(f: BinaryIO) -> None:
    """Drop a torn last line of the open results file ``f`` (a kill during a write), so that the next append starts
    on a fresh line: its last byte is read and, only after a torn write, the file back to its last newline."""
    end = f.seek(0, os.SEEK_END)
    if end == 0:
        return
    f.seek(end - 1)
    if f.read(1) == b"\n":
        return
    f.truncate(_last_newline(f, end) + 1)


def _last_newline(f: BinaryIO, end: int, block: int = 1 << 16) -> int:
    """The offset of the last newline before ``end`` in the open file ``f`` (-1: none), read backwards block by
    block: as far back as the torn line reaches, not the whole file."""
    while end > 0:
        start = max(0, end - block)
        f.seek(start)
        found = f.read(end - start).rfind(b"\n")
        if found >= 0:
            return start + found
        end = start
    return -1


def _alive(pid: str) -> bool:
    """Whether the process ``pid`` (as the lock file records it) runs; an unreadable record counts as running."""
    if not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
