"""The session is passed down: planning scenarios and building, training and describing a matchup with a session
given read that session's registries and never the process's; the process's datasets are memoised per loader
class, so two sessions with different loaders under one name never share a dataset."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

import arena.plugins
import arena.session
from arena.contracts.spec import PluginRef
from arena.pipeline.execute import base_row, game_for, procedure_for, train_release
from arena.pipeline.plan import load_dataset, plan
from arena.pipeline.store import RunStore
from arena.plugins import registries
from arena.session import Session
from tests.conftest import TINY, write_scenario


@pytest.fixture
def own_session() -> Iterator[Session]:
    """A session of its own, its registries built; then, for the test's body, reading the process's session is an
    error (undone before the suite's own fixtures tidy the process's session up)."""
    own = Session(catalog=None)  # only distributions trusted by name: no third-party code in this process
    registries(own)

    def refuse() -> Session:
        raise AssertionError("the process's session was read although a session was passed")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(arena.plugins, "current", refuse)
        patch.setattr(arena.session, "current", refuse)
        yield own


def test_planning_and_a_matchups_row_and_release_read_only_the_session_passed(own_session, tmp_path: Path):
    scenario = write_scenario(tmp_path / "tiny.yaml", TINY)
    matchups = plan([scenario], session=own_session).matchups
    assert {m.defense.name for m in matchups} == {"nonprivate", "dpsgd"}
    matchup = next(m for m in matchups if m.defense.name == "nonprivate")
    regs = own_session.registries
    row = base_row(matchup, own_session)
    assert row["primary_metric"] == regs.games.get("membership").primary_metric and row["metric_info"]
    store = RunStore(tmp_path / "run")
    assert procedure_for(matchup, store, regs).defense.name == "nonprivate"
    assert game_for(matchup, load_dataset(matchup.track.dataset, regs), store, regs) is not None
    assert 0.0 <= train_release(matchup, str(tmp_path / "run"), session=own_session)["utility"] <= 1.0


def test_the_dataset_memo_is_per_loader_class_not_per_name() -> None:
    regs = registries(Session(catalog=None))
    digits = regs.datasets.get("digits")

    class Halved(digits):  # another distribution's "digits": the same name, another loader
        def load(self, params):
            return dataclasses.replace(super().load(params), name="halved")

    other = SimpleNamespace(datasets=SimpleNamespace(get=lambda name: Halved))
    ref = PluginRef.model_validate({"name": "digits"})
    mine, theirs = load_dataset(ref, regs), load_dataset(ref, other)  # type: ignore[arg-type]
    assert mine is load_dataset(ref, regs)  # memoised per loader
    assert theirs is not mine and theirs.name == "halved" and mine.name != "halved"
