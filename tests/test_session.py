"""The session: the package's root establishes one with the attack sandbox's catalog before any module runs; a
session holds the registries built with it; importing it imports nothing heavy."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from arena import session
from arena.plugins import registries
from arena.session import Session


def test_the_root_establishes_a_session_with_the_sandbox_catalog() -> None:
    current = session.current()
    assert current.catalog is not None and current.catalog.__name__ == "_sandbox_catalog"


def test_registries_are_built_once_per_session_and_forgotten_on_demand() -> None:
    own = Session(catalog=None)  # no third-party code in this process: only distributions trusted by name
    first = registries(own)
    assert registries(own) is first and own.registries is first
    assert registries() is not first  # the process's session has registries of its own
    own.forget()
    assert own.registries is None and registries(own) is not first
    assert "lira" in first.attacks and "digits" in first.datasets


def test_establish_returns_the_session_it_replaces() -> None:
    mine = Session(catalog=None)
    previous = session.establish(mine)
    try:
        assert session.current() is mine and previous.catalog is not None
    finally:
        assert session.establish(previous) is mine
    assert session.current() is previous


@pytest.mark.subprocess
def test_importing_the_root_and_the_session_imports_neither_torch_nor_the_plugin_machinery() -> None:
    code = ("import json, sys, arena, arena.session; print(json.dumps([m for m in ('torch', 'arena.plugins', "
            "'arena.engine', 'pluggy') if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert json.loads(done.stdout) == []
