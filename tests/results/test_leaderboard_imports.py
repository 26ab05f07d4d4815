"""``arena leaderboard`` of a run whose matchups saved their draws, and whose DP-audit findings are kept, reads rows
and draws alone: it imports neither torch, Ray, scipy.stats nor the plugins (their start-up was most of the
command's time), and prints what the same board built in process prints."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from arena import api
from arena.results import leaderboard
from tests.results.test_leaderboard_draws import _save_draws
from tests.results.test_leaderboard_metrics import make_run

HEAVY = ("torch", "ray", "scipy.stats", "arena.plugins", "arena_plugins", "dp_accounting", "matplotlib")
PROBE = """
import contextlib, io, json, sys
from arena.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    status = main(["leaderboard", sys.argv[1]])
heavy = json.loads(sys.argv[2])
print(json.dumps({"status": status, "table": out.getvalue(),
                  "imported": [m for m in heavy if any(n == m or n.startswith(m + ".") for n in sys.modules)]}))
"""


@pytest.mark.subprocess
def test_a_leaderboard_of_saved_draws_and_kept_findings_imports_no_torch_scipy_stats_or_plugins(tmp_path) -> None:
    store = make_run(tmp_path / "run")
    _save_draws(store)
    results = api.load(store.root)
    expected = leaderboard.render_table(results.boards()) + "\n"  # also keeps the audit's findings, as a run does
    done = subprocess.run([sys.executable, "-c", PROBE, str(store.root), json.dumps(HEAVY)], capture_output=True,
                          text=True, check=True, timeout=120)
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert probe["status"] == 0 and probe["table"] == expected
    assert "drawn when each matchup was scored" in probe["table"]  # the saved draws were read, as numpy
    assert probe["imported"] == []
