"""The DP audit's findings as a board marks them (matchup key → one line), kept in the run directory so that a
leaderboard of an unchanged run neither loads the plugins nor runs the accountants again.

The file (``artifacts/audit-findings.json``, beside the matchups' arrays and outside the model cache) holds the
findings with the digest of everything they were computed from: every row given to the audit (as written, so a
re-played matchup, a bumped plugin version or an edited plugin's source hash in its ``versions`` changes it), this
arena's version and the source of the arena's audit code (``arena/results/audit.py``, ``arena/privacy/``, each
game's modules). A digest that differs, or a file that cannot be read, means: audit again (and keep the new
findings)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

FILE = "artifacts/audit-findings.json"
_ARENA = Path(__file__).resolve().parents[2]  # the arena package
_AUDIT_CODE = ("results/audit.py", "privacy/*.py", "games/*/*.py")  # a game's rule reads its other modules too


@lru_cache(maxsize=1)
def audit_code_digest() -> str:
    """SHA-256 over the arena's audit code (names and bytes, in order)."""
    h = hashlib.sha256()
    for pattern in _AUDIT_CODE:
        for path in sorted(_ARENA.glob(pattern)):
            h.update(str(path.relative_to(_ARENA)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def findings_digest(rows: Sequence[Mapping[str, Any]]) -> str:
    """The digest the findings of ``rows`` are kept under: the rows as JSON (keys sorted, in key order), the
    arena's version and its audit code."""
    from arena._version import __version__

    h = hashlib.sha256(f"arena {__version__}\0{audit_code_digest()}\0".encode())
    for row in sorted(rows, key=lambda r: str(r.get("key"))):
        h.update(json.dumps(row, sort_keys=True, default=str).encode() + b"\n")
    return h.hexdigest()


def cached_findings(root: Path | str, rows: Sequence[Mapping[str, Any]],
                    compute: Callable[[], Mapping[str, str]]) -> dict[str, str]:
    """The findings of ``rows`` kept in the run directory ``root`` when their digest matches; otherwise
    ``compute()`` (the audit), kept for the next board."""
    path = Path(root) / FILE
    digest = findings_digest(rows)
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        if kept.get("digest") == digest and isinstance(kept.get("findings"), dict):
            return {str(k): str(v) for k, v in kept["findings"].items()}
    except (OSError, ValueError, AttributeError):
        pass
    findings = dict(compute())
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps({"digest": digest, "findings": findings}, sort_keys=True), encoding="utf-8")
        tmp.replace(path)
    except OSError:  # a run directory we may not write: the findings are still right, only not kept
        pass
    return findings
