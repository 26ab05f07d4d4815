"""The games a run's results read, from their rows (``arena.results.games``): a built-in game's recorded parts are
what its class declares; anything a file could use to make the results import another module is read through the
registry instead; and a report and a first leaderboard of such a run import neither torch nor the plugins."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from arena import plugins
from arena.pipeline.execute import game_columns
from arena.results import games
from arena.results.audit import game_part
from tests.results.test_leaderboard_imports import PROBE
from tests.results.test_leaderboard_metrics import make_run

VERSIONS = {"game": "privacy-arena 0.1.0 / audit v1"}


def _rows(parts: dict, versions: dict = VERSIONS, n: int = 2) -> list[dict]:
    return [{"key": f"k{i}", "game": "audit", "versions": versions, "game_parts": parts} for i in range(n)]


@pytest.mark.slow  # loads the plugins
def test_a_built_in_games_recorded_parts_are_what_its_class_declares() -> None:
    cls = plugins.registries().games.get("audit")
    parts = game_columns("audit")["game_parts"]
    game = games.recorded_game("audit", _rows(parts))
    assert game is not None and games.BUILTIN_DISTRIBUTION == plugins.BUILTIN_DISTRIBUTION
    for part in games.PARTS:
        assert getattr(game, part) == getattr(cls, part, None)
        assert (game_part(game, part) is None) == (getattr(cls, part, None) is None)
    assert game.template_dir == cls.template_dir
    assert games.run_games(_rows(parts)) == {"audit": game}


@pytest.mark.parametrize("change", [
    {"audit_rule": "os:system"},  # a module outside the arena's games
    {"report_view": "arena_plugins.games:register_games"},
    {"template_dir": "/etc"},  # templates from outside the installed arena
    {"template_dir": 3},
])
def test_parts_a_file_could_point_elsewhere_are_not_taken_from_it(change) -> None:
    parts = {**game_columns("audit")["game_parts"], **change}
    assert games.recorded_game("audit", _rows(parts)) is None


def test_third_party_unversioned_or_disagreeing_rows_are_read_through_the_registry() -> None:
    parts = game_columns("audit")["game_parts"]
    assert games.recorded_game("audit", _rows(parts, {"game": "their-dist 1.0 / audit v1"})) is None
    assert games.recorded_game("audit", _rows(parts, {})) is None
    rows = _rows(parts)
    rows[1] = {**rows[1], "game_parts": {**parts, "resample": None, "audit_view": None}}
    assert games.recorded_game("audit", rows) is None
    assert games.recorded_game("audit", [{"key": "k", "game": "audit", "versions": VERSIONS}]) is None  # schema 2
    registered = games.run_games([{"key": "k", "game": "audit", "versions": VERSIONS}])
    assert registered == {"audit": plugins.registries().games.get("audit")}


HEAVY = ("torch", "ray", "arena.plugins", "arena_plugins")
REPORT_PROBE = """
import json, sys
from arena.cli import main
status = main(["report", sys.argv[1]])
heavy = json.loads(sys.argv[2])
print(json.dumps({"status": status,
                  "imported": [m for m in heavy if any(n == m or n.startswith(m + ".") for n in sys.modules)]}))
"""


@pytest.mark.subprocess
def test_a_first_leaderboard_and_a_report_of_recorded_games_import_neither_torch_nor_the_plugins(tmp_path) -> None:
    store = make_run(tmp_path / "run")
    for row in store.results():
        assert row["game_parts"]["audit_rule"].startswith("arena.games.membership.")
    lines = (store.root / "results.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [{**json.loads(line), "versions": {"game": "privacy-arena 0.1.0 / membership v1"}} for line in lines]
    (store.root / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    for probe in (PROBE, REPORT_PROBE):  # the leaderboard first: nothing kept yet, so it audits
        done = subprocess.run([sys.executable, "-c", probe, str(store.root), json.dumps(HEAVY)], capture_output=True,
                              text=True, check=True, timeout=300)
        out = json.loads(done.stdout.strip().splitlines()[-1])
        assert out["status"] == 0 and out["imported"] == []
    assert (store.root / "report" / "index.html").exists() and (store.root / "artifacts" / "audit.json").exists()
