"""Trust zones: which third-party code may run in the arena's process, and where untrusted attack code lives.

The arena's environment (the interpreter's ``site-packages`` and ``PYTHONPATH``) holds trusted code only: the
arena, its built-in plugins and the distributions the user installed there. Python runs every ``.pth`` file of an
environment in every interpreter that starts in it, the arena's included, so no check inside the arena can keep an
untrusted distribution installed there from running: untrusted attack distributions are installed into a site
directory of their own instead, the *untrusted site* (``arena plugins install``; ``ARENA_UNTRUSTED_SITE``, else
``$XDG_DATA_HOME/arena/untrusted-site``). The arena reads its distributions' metadata only (names, versions,
entry points: files, never code). Only sandboxed processes add it to their import path (``site.addsitedir``,
which runs its ``.pth`` files): the catalog that lists its plugins, the validation of their attacks' parameters
and the processes of its attacks, each after the change to the attack's own user (``arena.pipeline.sandbox``).

A distribution in the arena's environment that registers attacks together with a kind the challenger runs in its
own process (a game, dataset, model, defense or metric) would bring its attack code into the arena's process:
it is refused unless the user trusts it by name (``ARENA_TRUSTED=dist1,dist2``, or ``--trust DIST``).

This module imports nothing of the arena: both sides (the plugin loader and the sandbox) read it.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import sys
from pathlib import Path

TRUSTED_ENV = "ARENA_TRUSTED"
"""Comma-separated names of third-party distributions the user trusts to run in the arena's process."""
SITE_ENV = "ARENA_UNTRUSTED_SITE"
"""The untrusted site's folder (default: ``$XDG_DATA_HOME/arena/untrusted-site``, ``~/.local/share/...``)."""
ARENA_PROCESS = "arena process"
ATTACK_SANDBOX = "attack sandbox"
ENVIRONMENT = "arena environment"
UNTRUSTED_SITE = "untrusted site"

_in_sandbox: list[bool] = []


def normalize(name: str) -> str:
    """A distribution's name as PEP 503 compares them: lower case, runs of ``-``, ``_`` and ``.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def trusted_names() -> frozenset[str]:
    """The distributions the user trusts by name (``ARENA_TRUSTED``), normalised."""
    raw = os.environ.get(TRUSTED_ENV, "")
    return frozenset(normalize(part.strip()) for part in raw.split(",") if part.strip())


def is_trusted(distribution: str) -> bool:
    return normalize(distribution) in trusted_names()


def trust(names: list[str]) -> None:
    """Add ``names`` to ``ARENA_TRUSTED`` of this process (so the processes it starts, Ray's local workers
    included, trust them too): what ``--trust`` does."""
    current = [p.strip() for p in os.environ.get(TRUSTED_ENV, "").split(",") if p.strip()]
    os.environ[TRUSTED_ENV] = ",".join(dict.fromkeys(current + [n.strip() for n in names if n.strip()]))


def untrusted_site() -> Path:
    """The untrusted site's folder, whether or not it exists."""
    raw = os.environ.get(SITE_ENV)
    if raw:
        return Path(raw).expanduser().absolute()
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data).expanduser().absolute() / "arena" / "untrusted-site"


def site_in_use() -> str | None:
    """The untrusted site's folder where it exists (its path as a string), else None."""
    site = untrusted_site()
    return str(site) if site.is_dir() else None


def site_distributions() -> list[md.Distribution]:
    """The distributions installed in the untrusted site, found by their metadata (nothing of them is imported),
    sorted by name."""
    site = site_in_use()
    if site is None:
        return []
    found = [d for d in md.distributions(path=[site]) if d.metadata["Name"]]
    return sorted(found, key=lambda d: normalize(d.metadata["Name"]))


def startup_files(dist: md.Distribution) -> list[str]:
    """The ``.pth`` files a distribution installed at the top of its site (those Python runs at start-up)."""
    return sorted(str(f) for f in dist.files or () if len(f.parts) == 1 and f.name.endswith(".pth"))


def enter_sandbox() -> None:
    """Mark this process as a sandboxed one (an attack's, or the catalog's): every plugin is loaded here."""
    _in_sandbox[:] = [True]


def in_sandbox() -> bool:
    return bool(_in_sandbox)


def install_command(sources: list[str], site: Path, pip_options: list[str]) -> list[str]:
    """``pip install`` of ``sources`` (wheels, source folders, requirements as pip takes them) into ``site``,
    without their dependencies (those the attack needs beside the arena's own are installed there the same
    way), replacing what is there under the same names."""
    return [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-deps", "--upgrade",
            "--target", str(site), *pip_options, *sources]
