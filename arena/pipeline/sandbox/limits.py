"""What an attack may spend, and how its text reaches the arena: the sandbox's quotas, its process limits, escaping.

Each limit has a default and an environment variable that sets it (a number of bytes, rows or units; ``K``, ``M``
and ``G`` suffixes are powers of 1024), read by the arena when an attack's process starts:

* ``ARENA_SANDBOX_MESSAGE_BYTES`` (512M): the largest message the arena reads from an attack's process (its
  requests, its guess, its error); a longer one is refused before it is read.
* ``ARENA_SANDBOX_QUERY_ROWS``: rows one query may ask about (default: 4 × the most rows of any tensor in the
  view, at least 65,536).
* ``ARENA_SANDBOX_TRAIN_UNITS``: models × records × epochs of one training call, each chunk of ``train_chunks``
  counted as a call (default: 4 × ``chunk`` × the view's most rows × the recipe's epochs, at least 2²⁴); and
  ``ARENA_SANDBOX_TRAIN_TOTAL`` (64 × that) for all of a matchup's calls together.
* ``ARENA_SANDBOX_CACHE_BYTES`` (1G): bytes of attacker-trained models one matchup may add to the run's shared
  cache; past it, its training goes on uncached.
* ``ARENA_SANDBOX_OUTPUT_BYTES`` (64K): the attack's standard output and error relayed per matchup.
* ``ARENA_SANDBOX_NPROC`` (64), ``ARENA_SANDBOX_MEMORY`` (4G over the process's size when it starts; 0: no
  limit), ``ARENA_SANDBOX_FILE_BYTES`` (64M): ``RLIMIT_NPROC``, ``RLIMIT_AS`` and ``RLIMIT_FSIZE`` of the attack's
  process.
* ``ARENA_SANDBOX_TMP_BYTES`` (256M): run as root, the size of the attack's private ``/dev/shm`` (its
  ``TMPDIR``; ``scratch``), a tmpfs its memory limit does not count; 0: none (the machine's ``/dev/shm``).
* ``ARENA_SANDBOX_UID_BASE`` (0x78000000): run as root, each attack's process becomes the user ``base + its
  pid`` (unique among living processes; no entry in /etc/passwd is needed), above the ranges that systems hand
  out (subordinate ids, systemd-nspawn's 0x80000–0x6fffffff); 0: the user ``nobody``, shared by every attack.

A refusal is the attack's failure: ``AttackFailed('quota: ...')``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import overload

from arena.pipeline.text import printable as printable  # re-exported: how the sandbox escapes an attack's text

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
ERROR_CHARS = 4096
"""Characters of an error message a row keeps (a longer one is cut, saying how much was left out)."""
TRACEBACK_CHARS = 8192
"""Characters of a traceback a row keeps (its end: the frames nearest the error)."""
ARTIFACT_CHARS = 1 << 20
"""Characters of a long error and traceback kept beside the matchup's artifacts (``error.txt``)."""


@overload
def _env(name: str, default: int) -> int: ...
@overload
def _env(name: str, default: None) -> int | None: ...
def _env(name: str, default: int | None) -> int | None:
    raw = os.environ.get(name, "").strip().upper().removesuffix("IB").removesuffix("B")
    if not raw:
        return default
    match = re.fullmatch(r"(0X[0-9A-F]+|\d+)\s*([KMGT]?)", raw)
    if match is None:
        raise ValueError(f"{name}={os.environ[name]!r}: not a number (bytes, rows or units; K, M, G suffixes)")
    return int(match.group(1), 0) * _UNITS[match.group(2)]


@dataclass(frozen=True)
class Limits:
    """The sandbox's limits (module docstring); ``None`` where the default follows the view."""

    message_bytes: int = 512 << 20
    query_rows: int | None = None
    train_units: int | None = None
    train_total: int | None = None
    cache_bytes: int = 1 << 30
    output_bytes: int = 64 << 10
    nproc: int = 64
    memory: int = 4 << 30
    file_bytes: int = 64 << 20
    tmp_bytes: int = 256 << 20
    uid_base: int = 0x78000000

    @classmethod
    def from_env(cls) -> Limits:
        d = cls()
        return cls(
            message_bytes=_env("ARENA_SANDBOX_MESSAGE_BYTES", d.message_bytes),
            query_rows=_env("ARENA_SANDBOX_QUERY_ROWS", None),
            train_units=_env("ARENA_SANDBOX_TRAIN_UNITS", None),
            train_total=_env("ARENA_SANDBOX_TRAIN_TOTAL", None),
            cache_bytes=_env("ARENA_SANDBOX_CACHE_BYTES", d.cache_bytes),
            output_bytes=_env("ARENA_SANDBOX_OUTPUT_BYTES", d.output_bytes),
            nproc=_env("ARENA_SANDBOX_NPROC", d.nproc),
            memory=_env("ARENA_SANDBOX_MEMORY", d.memory),
            file_bytes=_env("ARENA_SANDBOX_FILE_BYTES", d.file_bytes),
            tmp_bytes=_env("ARENA_SANDBOX_TMP_BYTES", d.tmp_bytes),
            uid_base=_env("ARENA_SANDBOX_UID_BASE", d.uid_base),
        )

    def rlimits(self) -> dict[str, int]:
        """What the attack's process applies to itself before any of the attack's code runs."""
        return {"nproc": self.nproc, "memory": self.memory, "file_bytes": self.file_bytes,
                "tmp_bytes": self.tmp_bytes, "uid_base": self.uid_base}


# --- text from an attack, as the arena prints and stores it ---

def clip_text(text: object, limit: int, *, tail: bool = False) -> str:
    """``text`` printable and at most ``limit`` characters (plus a note): its start (``tail``: its end), saying
    how much was left out."""
    text = text if isinstance(text, str) else str(text)
    cut = text if len(text) <= limit else (text[-limit:] if tail else text[:limit])
    escaped = printable(cut)
    out = escaped if len(escaped) <= limit else (escaped[-limit:] if tail else escaped[:limit])  # escapes are longer
    if len(cut) == len(text) and len(out) == len(escaped):
        return out
    note = f"[{max(len(text) - len(cut), 0)} more characters not shown]"
    return f"{note}\n{out}" if tail else f"{out} {note}"
