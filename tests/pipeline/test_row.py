"""The result row's schema: one description of every field, written as ``schema`` into each row, checked on every
line read (rows written before the schema, version 0, by the checks of their time); the columns the store, the
leaderboard and the API need are derived from it; a matchup's key and row name the game and its version."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from arena.pipeline.plan import plan
from arena.pipeline.row import BOARD_COLUMNS, FIELDS, FRAME_COLUMNS, SCHEMA_VERSION, ResultRow, row_problem
from arena.pipeline.tournament import failed_row
from tests.conftest import write_scenario
from tests.pipeline.test_faults import SMALL


@pytest.fixture
def matchup(tmp_path: Path):
    (m,) = plan([write_scenario(tmp_path / "small.yaml", SMALL)]).matchups
    return m


def written(row: dict) -> dict:
    """The row as the store reads it back."""
    return json.loads(json.dumps(row, sort_keys=True, default=str))


def test_the_derived_columns_are_those_the_api_and_the_board_always_used() -> None:
    assert FRAME_COLUMNS == ("key", "scenario", "track", "game", "defense", "defense_label", "epsilon", "attack",
                             "attack_label", "seed", "status", "utility", "seconds", "error")
    assert {"key", "status", "track", "game", "defense", "defense_label", "attack_label", "seed"} == BOARD_COLUMNS
    assert list(FIELDS) == list(ResultRow.__annotations__)
    assert all(col.doc for _, col in FIELDS.values()), "every field says what it means"


def test_every_row_the_arena_writes_is_a_row_of_the_current_schema(matchup) -> None:
    row = written(failed_row(matchup, "boom", 0.5))
    assert row["schema"] == SCHEMA_VERSION and set(row) == set(FIELDS)
    assert row_problem(row) is None
    assert (row["primary_metric"], row["rank_metric"]) == ("auc", "tpr@1%fpr")
    assert row["metric_info"]["auc"] == {"higher_is_better": True, "bounds": [0.0, 1.0]}


@pytest.mark.parametrize(("change", "problem"), [
    ({"seed": "0"}, "'seed' is str, not an int"),
    ({"seed": True}, "'seed' is bool, not an int"),
    ({"utility": "0.9"}, "'utility' is str, not a float or null"),
    ({"notes": "none"}, "'notes' is str, not a list"),
    ({"claim": []}, "'claim' is list, not an object or null"),
    ({"schema": SCHEMA_VERSION + 1}, f"a row of schema {SCHEMA_VERSION + 1}, newer than this arena reads"),
    ({"schema": "1"}, "'schema' is '1', not a schema version"),
    ({"schema": -1}, "'schema' is -1, not a schema version"),
    ({"status": "maybe"}, "'status' is 'maybe', not one of ok, skipped, failed"),
    ({"key": ""}, "a JSON object without a matchup 'key'"),
])
def test_a_row_of_the_schema_with_a_wrong_field_is_not_a_row(matchup, change: dict, problem: str) -> None:
    row = {**written(failed_row(matchup, "boom", 0.5)), **change}
    assert row_problem(row).startswith(problem)


def test_a_row_of_the_schema_must_hold_every_field(matchup) -> None:
    row = written(failed_row(matchup, "boom", 0.5))
    for name in FIELDS:
        if name not in ("key", "status", "schema"):
            partial = {k: v for k, v in row.items() if k != name}
            assert row_problem(partial) == f"a row of schema {SCHEMA_VERSION} without {name!r}"


def test_rows_written_before_the_schema_are_read_by_the_checks_of_their_time() -> None:
    old = {"key": "k", "status": "ok", "track": "t", "seed": 0, "metrics": {"auc": 0.5}}  # no schema: version 0
    assert row_problem(old) is None
    assert row_problem({"key": "k", "status": "failed"}) is None  # version 0 asked for no more
    assert row_problem({**old, "metrics": [1]}) == "'metrics' is not a dict"
    assert row_problem({**old, "seed": "0"}) == "'seed' is not a int"
    assert row_problem({**old, "utility": "anything"}) is None  # not checked in version 0
    assert row_problem([1]) == "a JSON list, not a result row"


def test_the_key_and_the_row_name_the_game_and_its_version(matchup) -> None:
    assert matchup.game_version == "1" and matchup.track_identity()["game"]["name"] == "membership"
    newer = dataclasses.replace(matchup, game_version="2")
    assert newer.release_key != matchup.release_key and newer.key != matchup.key
    row = failed_row(matchup, "boom", 0.0)
    assert row["versions"]["game"].endswith("/ membership v1")
    assert {"arena", "torch", "python", "game", "defense", "attack"} <= set(row["versions"])
