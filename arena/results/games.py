"""The games a run's results read, as its rows record them: a built-in game's audit rule, report parts, resampling and
template folder come from its rows' ``game_parts`` (``arena.pipeline.row``, schema 3), so that a leaderboard or a
report imports those modules alone, never the plugins (whose start-up, torch with it, took 5 s of CPU).

Only the parts of a game whose rows say it came from the arena's own distribution (``versions["game"]``), naming
modules of the arena's games (``arena.games.``) and a template folder inside the installed arena, are taken from a
file: a third-party game, rows written before they recorded their game's parts, or rows that disagree, are read
through the plugin registry, as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BUILT_IN = "arena.games."
BUILTIN_DISTRIBUTION = "privacy-arena"  # as ``arena.plugins`` names it; importing that module loads the plugins
PARTS = ("audit_rule", "audit_view", "report_view", "resample")
_ARENA = Path(__file__).resolve().parents[1]  # the arena package


@dataclass(frozen=True)
class RecordedGame:
    """A built-in game as its rows record it: what ``arena.results.audit.game_part`` and the report read of a
    ``Game`` class, without importing it."""

    name: str
    audit_rule: str | None = None
    audit_view: str | None = None
    report_view: str | None = None
    resample: str | None = None
    template_dir: Path | None = None


def recorded_game(name: str, rows: Sequence[Mapping[str, Any]]) -> RecordedGame | None:
    """The game ``name`` as every one of its rows records it, or None (not recorded, not built in, or rows that
    disagree)."""
    mine = [r for r in rows if r.get("game") == name]
    recorded = [r.get("game_parts") for r in mine]
    if not recorded or any(p != recorded[0] for p in recorded) or not isinstance(recorded[0], Mapping):
        return None
    if not all(str((r.get("versions") or {}).get("game", "")).startswith(f"{BUILTIN_DISTRIBUTION} ") for r in mine):
        return None  # a game of another distribution (or rows that do not say) is read through the registry
    parts = recorded[0]
    named = {p: parts.get(p) for p in PARTS}
    if any(v is not None and (not isinstance(v, str) or not v.startswith(BUILT_IN)) for v in named.values()):
        return None
    folder = parts.get("template_dir")
    if folder is not None:
        if not isinstance(folder, str):
            return None
        path = Path(folder).resolve()
        if not path.is_relative_to(_ARENA / "games") or not path.is_dir():
            return None
    return RecordedGame(name, **named, template_dir=None if folder is None else Path(folder))


def run_games(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Game name → what the results read of it, for every game of ``rows``: the recorded built-in game, else the
    registered ``Game`` class (the plugins loaded only then); a game neither recorded nor registered is left out."""
    names = sorted({str(r["game"]) for r in rows if r.get("game")})
    out: dict[str, Any] = {}
    for name in names:
        game = recorded_game(name, rows)
        if game is not None:
            out[name] = game
    missing = [n for n in names if n not in out]
    if missing:
        from arena.plugins import registries

        games = registries().games
        out |= {n: games.get(n) for n in missing if n in games}
    return dict(sorted(out.items()))
