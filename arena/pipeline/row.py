"""One result row: what a line of ``results.jsonl`` holds, field by field with its type, and the check the store
runs on every line it reads.

``ResultRow`` is the schema, once: each field's type, and (``Col``) what it means and which derived column sets it
belongs to. Every row the arena writes carries ``schema = SCHEMA_VERSION``. Rows written before the schema existed
carry none: they are version 0 and are checked as they always were (a matchup ``key``, a known ``status``, and the
types of ``metrics``, ``seed``, ``track``, ``defense_label`` and ``attack_label`` where present). A row of version 1
or later holds every field of its version (``Col.since``) with its declared type. A row of a newer schema than this
arena's is not read: an older arena cannot know what its fields mean, so the store sets it aside like any other line
that is not a row.

Derived here: ``BOARD_COLUMNS`` (what a row needs to appear on a leaderboard) and ``FRAME_COLUMNS`` (the first
columns of ``Results.frame()``, in order).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypedDict, Union, get_args, get_origin, get_type_hints

SCHEMA_VERSION = 4


@dataclass(frozen=True)
class Col:
    """What a field means; ``frame``: a first column of ``Results.frame()``; ``board``: a row without it is not
    shown on a leaderboard; ``legacy``: checked (where present) in rows of schema 0 too."""

    doc: str
    frame: bool = False
    board: bool = False
    legacy: bool = False
    since: int = 1
    """The first schema version whose rows hold the field (older rows lack it)."""


class ResultRow(TypedDict):
    """A result row of schema ``SCHEMA_VERSION`` (one finished, skipped or failed matchup)."""

    schema: Annotated[int, Col("the version of this row's schema (absent in rows written before it: version 0)")]
    key: Annotated[str, Col("the matchup key: a hash of everything that determines the matchup (the release key, "
                            "the attack's name, parameters and version)", frame=True, board=True, legacy=True)]
    release_key: Annotated[str, Col("the key of the release attacked: the track (dataset, model, recipe, game "
                                    "spec, game version, data fingerprint), the defense configuration, the seed")]
    scenario: Annotated[str, Col("the scenario's name", frame=True)]
    track: Annotated[str, Col("the track's name", frame=True, board=True, legacy=True)]
    game: Annotated[str, Col("the game the track plays", frame=True, board=True)]
    defense: Annotated[str, Col("the defense plugin's name", frame=True, board=True)]
    defense_label: Annotated[str, Col("the defense configuration's label (dpsgd(eps=1))", frame=True, board=True,
                                      legacy=True)]
    defense_params: Annotated[dict[str, Any], Col("the defense configuration's parameters (JSON form), its "
                                                  "effective training recipe under 'training'")]
    epsilon: Annotated[float | None, Col("the configuration's target ε; null: it targets none", frame=True)]
    delta: Annotated[float | None, Col("the configuration's target δ; null: it targets none")]
    attack: Annotated[str, Col("the attack plugin's name", frame=True)]
    attack_label: Annotated[str, Col("the attack configuration's label", frame=True, board=True, legacy=True)]
    attack_params: Annotated[dict[str, Any], Col("the attack's parameters (JSON form)")]
    threat_model: Annotated[list[str], Col("the capabilities the attack was played with (its class's "
                                           "threat_model, read statically when planned): what its view granted",
                                           since=2)]
    seed: Annotated[int, Col("the scenario seed", frame=True, board=True, legacy=True)]
    definition: Annotated[dict[str, str], Col("hashes of the matchup's definition apart from its seed: 'track' (the "
                                              "track as run: dataset, model, recipe, game spec and versions, data "
                                              "fingerprint), 'defense' and 'attack' (name, parameters, version, "
                                              "recipe); rows of any runs that share all three pool as seeds",
                                              since=2)]
    status: Annotated[Literal["ok", "skipped", "failed"], Col("what became of the matchup", frame=True, board=True,
                                                              legacy=True)]
    utility: Annotated[float | None, Col("the release's utility (test accuracy); null: no release", frame=True)]
    seconds: Annotated[float, Col("wall-clock seconds the matchup took, its release's training included",
                                  frame=True)]
    error: Annotated[str | None, Col("why it failed or was skipped; null when ok", frame=True)]
    traceback: Annotated[str | None, Col("the failure's traceback, where there is one")]
    metrics: Annotated[dict[str, Any], Col("metric name → value (null: the sample cannot resolve it)", legacy=True)]
    operating_points: Annotated[dict[str, dict[str, Any]], Col(
        "metric name → the operating point behind each TPR at a fixed FPR in ``metrics`` that is a number: "
        "{'threshold': the lowest score called a member (score ≥ threshold; null: none is called one, TPR 0), "
        "'fpr': the realised FPR, 'false_positives', 'nonmembers', 'true_positives', 'members'}; empty for a game "
        "that reports none (rows of schema 3 or older lack it: read it as empty)", since=4)]
    notes: Annotated[list[str], Col("what the arena changed in the model (BatchNorm → GroupNorm under per-example "
                                    "clipping), then the game's notes on what the sample cannot resolve")]
    claim: Annotated[dict[str, Any] | None, Col("the release's privacy claim (ε, δ, accountant); null: none")]
    versions: Annotated[dict[str, str], Col("arena, torch and python; the game's, dataset's, model's, defense's "
                                            "and attack's distribution and plugin versions, with a hash of the "
                                            "source of a plugin installed locally or in editable mode")]
    metric_info: Annotated[dict[str, dict[str, Any]], Col("each metric of the game: higher_is_better, bounds "
                                                          "(null for an infinite end)")]
    primary_metric: Annotated[str | None, Col("the game's primary metric (shown beside the ranking one)")]
    rank_metric: Annotated[str | None, Col("the game's default ranking metric (its primary one unless it names "
                                           "another)")]
    game_parts: Annotated[dict[str, str | None], Col("what the results read of the game: its 'audit_rule', "
                                                     "'audit_view', 'report_view' and 'resample' ('module:function' "
                                                     "or null) and its 'template_dir', so that a leaderboard or "
                                                     "report of a built-in game imports those modules alone",
                                                     since=3)]


FIELDS: dict[str, tuple[Any, Col]] = {
    name: get_args(hint)[:2] for name, hint in get_type_hints(ResultRow, include_extras=True).items()
}
"""Field name → (its type, its ``Col``), in the order of ``ResultRow``."""
STATUSES: tuple[str, ...] = get_args(FIELDS["status"][0])
"""What can become of a matchup: ``ok``, ``skipped``, ``failed``."""
FRAME_COLUMNS: tuple[str, ...] = tuple(n for n, (_, col) in FIELDS.items() if col.frame)
BOARD_COLUMNS: frozenset[str] = frozenset(n for n, (_, col) in FIELDS.items() if col.board)
_LEGACY = tuple(n for n, (_, col) in FIELDS.items() if col.legacy and n not in ("key", "status"))


def _compiled(hint: Any) -> Callable[[object], bool]:
    """Whether a parsed JSON value has the declared type ``hint`` (containers are checked, not their items), as one
    function: the type's structure is read once, not for every field of every row."""
    origin = get_origin(hint)
    if hint is Any:
        return lambda value: True
    if origin in (Union, types.UnionType):
        checks = tuple(_compiled(arg) for arg in get_args(hint))
        return lambda value: any(check(value) for check in checks)
    if origin is Literal:
        allowed = get_args(hint)
        return lambda value: value in allowed
    if hint is type(None):
        return lambda value: value is None
    target = origin or hint
    if target is float:
        return lambda value: isinstance(value, (int, float)) and not isinstance(value, bool)
    if target is int:
        return lambda value: isinstance(value, int) and not isinstance(value, bool)
    return lambda value: isinstance(value, target)


_CHECKS: tuple[tuple[str, int, Callable[[object], bool], Any], ...] = tuple(
    (name, col.since, _compiled(hint), hint) for name, (hint, col) in FIELDS.items())
"""Each field's name, first schema version, compiled type check and type, in the order of ``ResultRow``."""


def describe(hint: Any) -> str:
    """A type as the messages say it ('a float or null', 'an object')."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(describe(arg) for arg in get_args(hint))
    if origin is Literal:
        return "one of " + ", ".join(map(str, get_args(hint)))
    if hint is type(None):
        return "null"
    return {dict: "an object", list: "a list", str: "a str", int: "an int", float: "a float"}.get(origin or hint,
                                                                                                  str(hint))


def schema_of(obj: dict[str, Any]) -> int | None:
    """A row's schema version (0 when it has none); None when ``schema`` is not a version."""
    version = obj.get("schema", 0)
    return version if isinstance(version, int) and not isinstance(version, bool) and version >= 0 else None


def row_problem(obj: object) -> str | None:
    """Why a parsed line of results.jsonl is not a result row of the arena, or None."""
    if not isinstance(obj, dict):
        return f"a JSON {type(obj).__name__}, not a result row"
    if not isinstance(obj.get("key"), str) or not obj["key"]:
        return "a JSON object without a matchup 'key'"
    if obj.get("status") not in STATUSES:
        return f"'status' is {obj.get('status')!r}, not one of {', '.join(STATUSES)}"
    version = schema_of(obj)
    if version is None:
        return f"'schema' is {obj.get('schema')!r}, not a schema version"
    if version > SCHEMA_VERSION:
        return f"a row of schema {version}, newer than this arena reads ({SCHEMA_VERSION}); upgrade privacy-arena"
    if version == 0:  # written before rows carried a schema: the checks of that time
        for name in _LEGACY:
            kind = get_origin(FIELDS[name][0]) or FIELDS[name][0]
            if name in obj and not isinstance(obj[name], kind):
                return f"{name!r} is not a {kind.__name__}"
        return None
    for name, since, fits, hint in _CHECKS:
        if name not in obj:
            if since > version:
                continue
            return f"a row of schema {version} without {name!r}"
        if not fits(obj[name]):
            return f"{name!r} is {type(obj[name]).__name__}, not {describe(hint)}"
    return None

