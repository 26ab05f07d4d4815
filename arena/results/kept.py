"""The DP audit of a run kept in its directory, so that it is computed once however many commands read it: the
run's own summary, ``arena leaderboard`` (its findings) and ``arena report`` (every record) share it.

The file (``artifacts/audit.json``) holds the audit's records as JSON with the digest they were computed under
(``arena.results.leaderboard.findings.findings_digest``: every row as written, the arena's version and its audit
code); a digest that differs, or a file that cannot be read, means: audit again, and keep the new audit. Records are
frozen dataclasses of numbers, strings, tuples and mappings; they are written field by field with the name of
their class, and read back only into dataclasses of the arena's audit modules (``TRUSTED``; never a class a file
names elsewhere, never pickle). An audit holding anything else (a third-party game's record type, an array) is not
kept: it is computed every time, as before.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from arena.pipeline.files import _atomic_write
from arena.results.audit import Audit
from arena.results.leaderboard.findings import findings_digest

FILE = "artifacts/audit.json"
TRUSTED = ("arena.results.", "arena.privacy.", "arena.games.")
"""The packages whose dataclasses a kept audit may be read back into (the audit's records and bounds)."""


def encode(value: Any) -> Any:
    """``value`` as JSON-ready data that ``decode`` turns back into an equal value; TypeError for anything else."""
    if value is None or isinstance(value, (bool, str, int)) and not isinstance(value, np.generic):
        return value
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else {"float": repr(float(value))}
    if isinstance(value, np.generic):
        return encode(value.item())
    if isinstance(value, tuple):
        return {"tuple": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, Mapping):
        return {"mapping": [[encode(k), encode(v)] for k, v in value.items()]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        if not cls.__module__.startswith(TRUSTED):  # str.startswith takes the tuple
            raise TypeError(f"{cls.__module__}.{cls.__qualname__} is not a dataclass of the arena")
        return {"dataclass": f"{cls.__module__}:{cls.__qualname__}",
                "fields": {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}}
    raise TypeError(f"cannot keep a {type(value).__name__} in a kept audit")


def decode(data: Any) -> Any:
    """The value ``encode`` wrote; ValueError for data it cannot have written."""
    if data is None or isinstance(data, (bool, str, int, float)):
        return data
    if isinstance(data, list):
        return [decode(v) for v in data]
    if not isinstance(data, dict) or len(data) not in (1, 2):
        raise ValueError("not a kept value")
    if "float" in data:
        return float(data["float"])
    if "tuple" in data:
        return tuple(decode(v) for v in data["tuple"])
    if "mapping" in data:
        return {decode(k): decode(v) for k, v in data["mapping"]}
    return _dataclass(str(data["dataclass"]))(**{k: decode(v) for k, v in dict(data["fields"]).items()})


def _dataclass(name: str) -> type:
    module, _, qualname = name.partition(":")
    if not module.startswith(TRUSTED) or not qualname.isidentifier():
        raise ValueError(f"{name!r} is not a dataclass of the arena")
    cls = getattr(importlib.import_module(module), qualname, None)
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise ValueError(f"{name!r} is not a dataclass of the arena")
    return cls


def kept_audit(root: Path | str, rows: Sequence[Mapping[str, Any]], compute: Callable[[], Audit]) -> Audit:
    """The audit of ``rows`` kept in the run directory ``root`` when its digest matches; otherwise ``compute()``,
    kept for the next reader (unless a record cannot be kept, or the directory cannot be written)."""
    path = Path(root) / FILE
    digest = findings_digest(rows)
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(kept, dict) and kept.get("digest") == digest:
            audit = decode(kept["audit"])
            if isinstance(audit, Audit):
                return audit
    except (OSError, ValueError, TypeError, KeyError, AttributeError, ImportError):
        pass
    audit = compute()
    try:
        text = json.dumps({"digest": digest, "audit": encode(audit)}, allow_nan=False)
        _atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    except (TypeError, ValueError, OSError):  # a record this codec cannot keep, or a directory we may not write
        pass
    return audit
