"""The DP audit: does a defense leak more than its (ε, δ) claim allows, in the experiment actually played?

This module is the game-agnostic driver: it picks the ok rows whose defense claims (ε, δ), hands each game's rows
to that game's audit rule (``Game.audit_rule``, ``arena/games/<game>/rule.py``) and gathers the results. A game's
rule returns a ``GameAudit``: its records, the violations among them (a violation sets exit status 3), a one-line
finding per violation, and the matchups it could not audit. The shared statistics live in ``arena.privacy``
(Clopper–Pearson intervals in ``arena.privacy.binomial`` and the (ε, δ) line in ``arena.privacy.tradeoff``, offered
here to the games' rules); the seed of a matchup's selection/evaluation split is ``arena.engine.seeds.split_seed``.

Everything here is a pure function of result rows and the attacks' saved arrays.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from arena.contracts.arrays import ArrayLoader as ArrayLoader  # re-exported for the games' rules
from arena.engine.seeds import split_seed as split_seed  # re-exported for the games' rules
from arena.pipeline.store import RunStore
from arena.privacy.binomial import clopper_pearson as clopper_pearson  # re-exported for the games' rules


def scaled(epsilon: float, p: float, delta: float) -> float:
    """min(1, e^ε·p + δ) (``arena.privacy.tradeoff.eps_delta_line``) in the argument order the games' rules use."""
    from arena.privacy.tradeoff import eps_delta_line  # scipy.stats with it: a board that reads findings needs none

    return eps_delta_line(epsilon, delta, p)


@dataclass(frozen=True)
class AuditedMatchup:
    """The columns every audit record shares: which matchup, and the (ε, δ) its defense claims."""

    key: str
    track: str
    defense_label: str
    attack: str
    seed: int
    claimed_epsilon: float
    delta: float


def claimed(row: Mapping[str, Any]) -> tuple[float, float]:
    """The (ε, δ) a row's defense achieved and claims."""
    return float(row["claim"]["epsilon"]), float(row["claim"]["delta"])


def identity(row: Mapping[str, Any]) -> dict[str, Any]:
    """The columns that name a matchup in every audit record."""
    return {"key": row["key"], "track": row["track"], "defense_label": row["defense_label"],
            "attack": row["attack_label"], "seed": row["seed"]}


@dataclass(frozen=True)
class GameAudit:
    """One game's audit of a run: its records, the violations among them (each sets exit status 3) with a
    one-line finding per violating matchup key, lines for the command line, the claiming matchups it could not
    audit, and how many matchups its verdict covers (``tested``, the count in the run's summary)."""

    game: str
    records: tuple[Any, ...] = ()
    violations: tuple[Any, ...] = ()
    findings: Mapping[str, str] = field(default_factory=dict)
    lines: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    tested: int = 0


@dataclass(frozen=True)
class Audit:
    """Every auditable matchup of a run, per game; ``audit.<game>`` is that game's records."""

    games: Mapping[str, GameAudit]

    def __getattr__(self, name: str) -> tuple[Any, ...]:
        games = self.__dict__.get("games") or {}
        if name in games:
            return games[name].records
        raise AttributeError(f"{type(self).__name__!r} has no attribute {name!r} (games audited: {sorted(games)})")

    @property
    def violations(self) -> tuple[Any, ...]:
        return tuple(v for g in self.games.values() for v in g.violations)

    @property
    def missing_arrays(self) -> tuple[str, ...]:
        """Keys of claiming matchups whose saved arrays were not found."""
        return tuple(k for g in self.games.values() for k in g.missing)

    @property
    def tested(self) -> int:
        return sum(g.tested for g in self.games.values())

    def violation_keys(self) -> frozenset[str]:
        return frozenset(a.key for a in self.violations)


def _claims(row: Mapping[str, Any]) -> bool:
    claim = row.get("claim") or {}
    return row.get("status") == "ok" and claim.get("epsilon") is not None and claim.get("delta") is not None


GamePart = Literal["audit_rule", "audit_view", "report_view", "resample"]


def game_part(game: type, part: GamePart) -> Callable[..., Any] | None:
    """The function a game names as its ``part`` (``"module:function"``, imported now), or None: it has none."""
    target = getattr(game, part, None)
    if target is None:
        return None
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def audit_rows(rows: Sequence[Mapping[str, Any]], arrays: ArrayLoader,
               games: Mapping[str, Any] | None = None) -> Audit:
    """Audit every ok matchup whose defense claims (ε, δ): each game (``games``, name → ``Game`` class or
    ``arena.results.games.RecordedGame``; default: the games of ``rows``, ``arena.results.games.run_games``)
    audits its own rows; ``arrays(key)`` returns a matchup's saved arrays."""
    if games is None:
        from arena.results.games import run_games

        games = run_games(rows)
    claiming: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        if _claims(row):
            claiming.setdefault(row["game"], []).append(row)
    out: dict[str, GameAudit] = {}
    for name in sorted(games):
        rule = game_part(games[name], "audit_rule")
        found = None if rule is None else rule(claiming.get(name, []), arrays)
        if found is not None:
            out[name] = found
    return Audit(out)


def saved_arrays(store: RunStore) -> ArrayLoader:
    """The loader of a run directory's per-matchup arrays (as numpy), None for a matchup that saved none."""
    return store.read_arrays


def audit_store(store: RunStore, rows: list[dict[str, Any]]) -> Audit:
    """Audit ``rows`` of a run directory, reading scores from its artifact cache."""
    return audit_rows(rows, saved_arrays(store))


def violation_findings(audit: Audit) -> dict[str, str]:
    """Matchup key → a one-line finding for each violation (for the leaderboard and the run summary)."""
    return {k: v for g in audit.games.values() for k, v in g.findings.items()}


def audit_lines(audit: Audit) -> list[str]:
    """Every game's lines for the command line (each game puts its violations first)."""
    return [line for g in audit.games.values() for line in g.lines]
