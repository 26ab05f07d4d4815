"""Safe file primitives of a run directory: atomic writes, opening only regular files (no links, no FIFOs), the
error a run directory that cannot be used raises, and the one-line warning."""

from __future__ import annotations

import fcntl
import os
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from arena.pipeline.text import shown


class RunDirError(Exception):
    """The run directory cannot be used: another run holds it, or it is not an arena run directory."""


def _atomic_write(path: Path, write: Callable[[str], object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def warn(message: str) -> None:
    """One line on stderr: what the arena noticed and what it does about it."""
    print(f"warning: {shown(message)}", file=sys.stderr)


def open_regular(path: Path, flags: int, mode: int = 0o600) -> int:
    """A file descriptor on ``path`` opened with ``O_NOFOLLOW`` and (for the open itself) ``O_NONBLOCK``, so a
    symbolic link is refused and a FIFO cannot hang us; anything but a regular file is refused (``RunDirError``)."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RunDirError(f"{path}: not a regular file; refusing to use it")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd
