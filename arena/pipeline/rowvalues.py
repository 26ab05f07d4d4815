"""What the values inside a result row may be, beyond the field types ``arena.pipeline.row`` checks: finite,
non-negative numbers where the readers compute with them, bounded strings, and the shapes of the nested objects
(``metrics``, ``metric_info``, ``claim``, ``versions``, ``definition``, ``notes``, ``threat_model``) that the
leaderboard, the audit and the report read. A row that fails is set aside by the store like a torn line, so that
no reader ever meets an ill-typed value."""

from __future__ import annotations

import math
from typing import Any

MAX_NAME = 1024
"""Longest name, label, key or version string in a row (scenario names are at most 64 characters)."""
MAX_TEXT = 1 << 20
"""Longest error or traceback text in a row (1 MiB)."""
MAX_SEED = 1 << 63
COUNTS = ("n_members", "n_nonmembers", "n_targets", "n_challenges")
"""Metrics that are sample sizes: non-negative integers."""
_NAMES = ("key", "release_key", "scenario", "track", "game", "defense", "defense_label", "attack", "attack_label",
          "primary_metric", "rank_metric")


MAX_INT = 1 << 64
"""The largest magnitude of a whole number in a row: any reader may turn it into a float (``10**4000`` overflows)."""


def _number(v: object) -> bool:
    return isinstance(v, float) or (isinstance(v, int) and not isinstance(v, bool) and -MAX_INT <= v <= MAX_INT)


def _finite(v: object, low: float = -math.inf) -> bool:
    return _number(v) and math.isfinite(v) and v >= low  # type: ignore[operator, arg-type]


def _strings(v: object, limit: int = MAX_NAME) -> bool:
    return isinstance(v, str) and len(v) <= limit


def _claim_problem(claim: object) -> str | None:
    if claim is None:
        return None
    if not isinstance(claim, dict):
        return "'claim' is not an object"
    if not _finite(claim.get("epsilon"), 0.0):
        return "'claim.epsilon' is not a finite number >= 0"
    if not _finite(claim.get("delta"), 0.0) or claim["delta"] > 1:
        return "'claim.delta' is not a number in [0, 1]"
    if not _strings(claim.get("accountant", "")) or not _strings(claim.get("mechanism", "")):
        return "'claim.accountant' or 'claim.mechanism' is not a short string"
    for name in ("target_epsilon", "noise_multiplier", "sample_rate", "steps"):
        if claim.get(name) is not None and not _finite(claim[name], 0.0):
            return f"'claim.{name}' is not a finite number >= 0 or null"
    return None


def _metric_info_problem(info: dict[Any, Any]) -> str | None:
    for name, entry in info.items():
        if not _strings(name) or not isinstance(entry, dict):
            return f"'metric_info.{str(name)[:64]}' is not an object"
        if not isinstance(entry.get("higher_is_better"), bool):
            return f"'metric_info.{name}.higher_is_better' is not a boolean"
        bounds = entry.get("bounds")
        if not (isinstance(bounds, list) and len(bounds) == 2
                and all(b is None or _finite(b) for b in bounds)):
            return f"'metric_info.{name}.bounds' is not two finite numbers or nulls"
        if None not in bounds and bounds[0] > bounds[1]:
            return f"'metric_info.{name}.bounds' is not ordered"
        if "trials" in entry and not _strings(entry["trials"]):
            return f"'metric_info.{name}.trials' is not a metric's name"
    return None


def value_problem(row: dict[str, Any]) -> str | None:
    """Why a row whose fields have their declared types (``row_problem`` is None) holds values no reader can
    use, or None. Fields absent from older rows are not required here."""
    for name in _NAMES:
        if name in row and row[name] is not None and not _strings(row[name]):
            return f"{name!r} is longer than {MAX_NAME} characters"
    for name in ("error", "traceback"):
        if row.get(name) is not None and not _strings(row[name], MAX_TEXT):
            return f"{name!r} is longer than {MAX_TEXT} characters"
    if "seed" in row and not (_number(row["seed"]) and isinstance(row["seed"], int) and 0 <= row["seed"] < MAX_SEED):
        return "'seed' is not an integer in [0, 2^63)"
    for name, low in (("epsilon", 0.0), ("delta", 0.0), ("utility", -math.inf), ("seconds", 0.0)):
        if row.get(name) is not None and not _finite(row[name], low):
            return f"{name!r} is not a finite number" + (" >= 0" if low == 0 else "")
    if row.get("delta") is not None and row["delta"] > 1:
        return "'delta' is more than 1"
    metrics = row.get("metrics", {})
    if isinstance(metrics, dict):
        info = row.get("metric_info")
        declared = info if isinstance(info, dict) else {}
        for name, v in metrics.items():
            # games also record flags and labels (the audit's claim_consistent/violation/input_kind, the
            # reconstruction's kappa_exact): booleans and short strings; a declared metric is a number or null
            if not _strings(name) or not (v is None or _number(v) or (
                    name not in declared and (isinstance(v, bool) or _strings(v)))):
                return f"'metrics.{str(name)[:64]}' is not a number or null"
            if name in COUNTS and not (isinstance(v, int) and v >= 0):
                return f"'metrics.{name}' is not a non-negative integer"
    for name in ("notes", "threat_model"):
        if isinstance(row.get(name), list) and not all(_strings(v, MAX_TEXT) for v in row[name]):
            return f"{name!r} holds something other than strings"
    for name in ("versions", "definition"):
        if isinstance(row.get(name), dict) and not all(_strings(k) and _strings(v, MAX_TEXT)
                                                      for k, v in row[name].items()):
            return f"{name!r} holds something other than strings"
    if isinstance(row.get("metric_info"), dict) and (problem := _metric_info_problem(row["metric_info"])):
        return problem
    return _claim_problem(row.get("claim"))
