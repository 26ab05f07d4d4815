"""Hostile attacks of the routes issue 40 left open (C and M are inputs, tested elsewhere): an unbounded number in
a guess (D), control sequences from a ``Params`` validator and a newline in an error (E), a full ``/dev/shm`` (G),
files left in scratch and Ray's folders (H), Ray's sockets renamed (I). Each writes what it saw into
``$HOSTILE_DIR``. Self-contained: installed as a plugin distribution (``arena_routes``)."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import tempfile

import numpy as np
from pydantic import field_validator

from arena import Attack, MembershipGuess, hookimpl

ESCAPES = "\x1b]0;pwned\x07\x1b[2J\r\u202e"
FORGED = "2 matchups: 2 ok, 0 skipped, 0 failed"


def note(name: str, value: object) -> None:
    folder = os.environ.get("HOSTILE_DIR")
    if folder:
        with contextlib.suppress(OSError), open(os.path.join(folder, f"{name}.{os.getpid()}.json"), "w") as f:
            json.dump(value, f)


def blank(view, references: object = None) -> MembershipGuess:
    n = len(view.challenge_y)
    return MembershipGuess(scores=np.zeros(n), decisions=np.zeros(n, dtype=bool), references=references)


class Route(Attack):
    game = "membership"
    threat_model = frozenset({"query"})


class BigNumber(Route):
    name = "route-big-number"

    def run(self, view):
        return blank(view, 10**4000)


class ForgedParams(Route):
    name = "route-forged-params"

    class Params(Attack.Params):
        tag: str = "plain"

        @field_validator("tag")
        @classmethod
        def _forge(cls, value: str) -> str:
            return f"{value}{ESCAPES}\n{FORGED}"

    def run(self, view):
        return blank(view)


class NewlineError(Route):
    name = "route-newline-error"

    def run(self, view):
        raise ValueError(f"{ESCAPES}\n{FORGED}\nDP audit: 0 matchup(s)")


class ShmFill(Route):
    name = "route-shm-fill"

    def run(self, view):
        wrote, error, tmpdir = 0, None, tempfile.gettempdir()  # before the fill: it tries a write there
        chunk = b"\xff" * (1 << 20)
        try:
            with open("/dev/shm/route-fill", "wb") as f:
                for _ in range(1024):  # up to 1 GiB, past any quota the test sets
                    f.write(chunk)
                    f.flush()
                    wrote += len(chunk)
        except OSError as exc:
            error = type(exc).__name__
        note("shm", {"wrote": wrote, "error": error, "tmpdir": tmpdir})
        return blank(view)


class Scratch(Route):
    name = "route-scratch"

    def run(self, view):
        left = []
        targets = [tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm", os.environ.get("ROUTE_OPEN", "")]
        targets += glob.glob("/tmp/ray/session_*/logs") + glob.glob("/tmp/ray/session_*")
        for folder in targets:
            if not folder:
                continue
            path = os.path.join(folder, f"route-left-{os.getpid()}")
            with contextlib.suppress(OSError):
                os.makedirs(path + ".d/deeper", exist_ok=True)
                with open(path + ".d/deeper/file", "w") as f:
                    f.write("x")
                with open(path, "w") as f:
                    f.write("x")
                left += [path, path + ".d"]
        note("scratch", {"left": left, "ray": glob.glob("/tmp/ray/*")})
        return blank(view)


class Sockets(Route):
    name = "route-sockets"

    def run(self, view):
        found = glob.glob("/tmp/ray/session_*/sockets/*") + glob.glob("/tmp/ray/session_*/sockets")
        renamed = []
        for path in glob.glob("/tmp/ray/session_*/sockets/*"):
            with contextlib.suppress(OSError):
                os.rename(path, path + ".moved")
                renamed.append(path)
        note("sockets", {"found": found, "renamed": renamed})
        return blank(view)


ALL = (BigNumber, ForgedParams, NewlineError, ShmFill, Scratch, Sockets)


@hookimpl
def register_attacks(register) -> None:
    for cls in ALL:
        register(cls)
