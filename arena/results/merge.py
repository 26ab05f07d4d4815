"""One benchmark across runs: the result rows of several run directories as one set of rows, for one leaderboard.

A benchmark is run over weeks, on several machines, into several run directories, each with its own secret. The
rows carry what is needed to merge them (``arena.pipeline.row``): the matchup's ``definition``, hashes of its track
as run (dataset, model, recipe, game spec and versions, data fingerprint), of its defense configuration and of its
attack configuration. The rules:

* **Seeds pool** where the definition is the same: rows of one track definition and one defense and attack
  definition, from any run, are the seeds of one cell. Seed 0 of a run and seed 0 of a run with another secret
  are two independent experiments (the secret keys every choice of the challenger), so both count.
* **The same experiment counts once**: a row whose matchup key and run secret both recur in another directory
  (a copy of a run, or a run reproduced with its ``ARENA_RUN_SECRET``) is a duplicate; the first given is kept.
* **Conflicting definitions are shown apart, never averaged**: a track name with two definitions becomes two
  tracks, ``name@hash8`` (the first 8 digits of each definition's hash); within a track, two configurations
  sharing a label (an attack whose version changed, say) become ``label@hash8``. Rows written before rows carried
  a definition (schema 1 and older) cannot be proven equal to anything: their tracks are their run's alone.

Merged rows get a key of their own (``key@run``, where ``run`` is the first 8 digits of a hash of the run's
secret; never the secret), and keep ``source_key``, the key in their run's ``results.jsonl``, and ``run``, their
run's name. The DP audit of a merged benchmark is each run's own audit (a matchup's audit is seeded by its own
key), gathered.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arena.contracts.arrays import ArrayLoader
from arena.pipeline.store import (
    RESULTS,
    SECRET,
    RunDirError,
    RunStore,
    content_key,
    parse_secret,
    read_results,
)
from arena.results.audit import Audit, GameAudit
from arena.results.leaderboard import DrawLoader, rank_by_of

SHORT = 8
"""Hex digits of a hash shown in a name (``track@1a2b3c4d``)."""


@dataclass(frozen=True)
class Run:
    """One run directory of a merge: where it is, its name in the merge, the identity of its experiments (a hash
    of its secret, or of its path when it has none) and how many rows it gave and had counted already."""

    root: Path
    name: str
    identity: str
    rows: int = 0
    duplicates: int = 0


@dataclass
class Merged:
    """The rows of several run directories as one benchmark (see the module's rules)."""

    runs: tuple[Run, ...]
    rows: list[dict[str, Any]]
    sources: dict[str, tuple[int, str]]
    """Merged key → (index of its run in ``runs``, its key there)."""
    audits: tuple[Audit, ...] = ()
    warnings: list[str] = field(default_factory=list)
    tracks: dict[str, list[str]] = field(default_factory=dict)
    """Track name → the names it is shown under (more than one: conflicting definitions)."""

    def arrays(self) -> ArrayLoader:
        """The loader of merged rows' saved arrays, read from their own run directories."""
        stores = [RunStore(r.root) for r in self.runs]

        def load(key: str) -> Mapping[str, Any] | None:
            if key not in self.sources:
                return None
            i, source = self.sources[key]
            return stores[i].read_arrays(source)

        return load

    def draws(self) -> DrawLoader:
        """The loader of merged rows' bootstrap draws (saved when each was scored), from their own run
        directories."""
        stores = [RunStore(r.root) for r in self.runs]

        def load(key: str) -> Mapping[str, Any] | None:
            if key not in self.sources:
                return None
            i, source = self.sources[key]
            return stores[i].load_draws(source)

        return load

    def rank_by(self) -> dict[str, str]:
        """Scenario name → its ``rank_by``, from every run's scenario files (the first run naming it wins)."""
        out: dict[str, str] = {}
        for run in self.runs:
            for name, metric in rank_by_of(run.root).items():
                out.setdefault(name, metric)
        return out

    def audit(self) -> Audit:
        """Every run's own DP audit gathered, its findings keyed by the merged keys."""
        merged_key = {(i, source): key for key, (i, source) in self.sources.items()}
        games: dict[str, dict[str, Any]] = {}
        for i, audit in enumerate(self.audits):
            for name, g in audit.games.items():
                acc = games.setdefault(name, {"records": [], "violations": [], "findings": {}, "lines": [],
                                              "missing": [], "tested": 0})
                acc["records"] += g.records
                acc["violations"] += g.violations
                acc["lines"] += [f"{self.runs[i].name}: {line}" for line in g.lines]
                acc["missing"] += g.missing
                acc["tested"] += g.tested
                acc["findings"].update({merged_key[i, k]: v for k, v in g.findings.items() if (i, k) in merged_key})
        return Audit({name: GameAudit(name, tuple(a["records"]), tuple(a["violations"]), a["findings"],
                                      tuple(a["lines"]), tuple(a["missing"]), a["tested"])
                      for name, a in games.items()})


def run_identity(root: Path) -> str:
    """A hash of the run directory's secret (which keys every random choice of its challenger), so that two
    directories holding the same experiments are recognised without the secret being shown; a directory without
    a secret is its own (a hash of its resolved path). ``RunDirError`` for a malformed secret file."""
    path = Path(root) / SECRET
    if path.exists():
        secret = parse_secret(path.read_text(encoding="ascii", errors="replace"), str(path))
        return hashlib.sha256(b"privacy-arena run identity\0" + secret).hexdigest()[:16]
    return hashlib.sha256(f"privacy-arena run path\0{Path(root).resolve()}".encode()).hexdigest()[:16]


def line_hashes(root: Path | str) -> dict[str, str]:
    """Matchup key → the SHA-256 of its latest line in the run directory's ``results.jsonl`` (without the newline):
    what a published row is checked against (``sed -n Np results.jsonl | tr -d '\\n' | sha256sum``)."""
    read = read_results(Path(root) / RESULTS)
    return {row["key"]: hashlib.sha256(raw).hexdigest() for row, raw in zip(read.rows, read.kept)}


MERGE_FIELDS = ("run", "content_hash", "source_key", "source_release_key", "source_track",
                "source_defense_label", "source_attack_label")
"""What a merge adds to a row: its run's name, the hash of its line, the key, track and labels it renamed."""


def _names(roots: Sequence[Path]) -> list[str]:
    """Each run's name in the merge: its directory's name, made unique with its parents' (or a number)."""
    names: list[str] = []
    for root in roots:
        parts = Path(root).resolve().parts
        depth = 1
        name = parts[-1]
        while name in names and depth < len(parts):
            depth += 1
            name = "/".join(parts[-depth:])
        k = 2
        base = name
        while name in names:
            name, k = f"{base}~{k}", k + 1
        names.append(name)
    return names


def _definition(row: Mapping[str, Any], part: str, run: Run) -> str:
    """The row's definition hash of ``part`` (track, defense, attack); for rows written before rows carried one,
    a stand-in that no other run shares (the track) or that the row's own columns determine (the configurations)."""
    found = (row.get("definition") or {}).get(part)
    if isinstance(found, str) and found:
        return found
    if part == "track":
        return content_key({"legacy-track": row.get("track"), "run": run.identity})
    columns = ("defense", "defense_params", "defense_label") if part == "defense" else \
        ("attack", "attack_params", "attack_label")
    return content_key({"legacy": part, **{c: row.get(c) for c in columns},
                        "version": (row.get("versions") or {}).get(part)})


def _rename(rows: list[dict[str, Any]], column: str, part: str, runs: Sequence[Run], index: Mapping[int, int],
            warnings: list[str], where: str) -> None:
    """Give each definition of ``part`` one label (the first its rows carry) and label two definitions sharing a
    label ``label@hash8``, so that a cell never averages two definitions."""
    label_of: dict[str, str] = {}
    for r in rows:
        label_of.setdefault(_definition(r, part, runs[index[id(r)]]), r[column])
    by_label: dict[str, list[str]] = {}
    for definition, label in label_of.items():
        by_label.setdefault(label, []).append(definition)
    final = {}
    for label, definitions in by_label.items():
        for d in definitions:
            final[d] = label if len(definitions) == 1 else f"{label}@{d[:SHORT]}"
        if len(definitions) > 1:
            warnings.append(f"{where}: {len(definitions)} {part} configurations are labelled {label!r} across the "
                            f"runs (different parameters or versions); shown apart as "
                            f"{', '.join(final[d] for d in definitions)}")
    relabelled = set()
    for r in rows:
        new = final[_definition(r, part, runs[index[id(r)]])]
        if new != r[column]:
            r[f"source_{column}"] = r[column]
            if new.split("@")[0] != r[column]:
                relabelled.add((r[column], new))
            r[column] = new
    for old, new in sorted(relabelled):
        warnings.append(f"{where}: {part} {old!r} is the configuration labelled {new!r} in another run; shown as "
                        f"{new!r}")


def merge(runs: Sequence[tuple[Path | str, Sequence[Mapping[str, Any]], Audit | None]]) -> Merged:
    """Merge run directories, each given as (its path, its rows as its ``Results`` reads them, its DP audit or
    None), into one benchmark. ``RunDirError`` for a malformed secret file."""
    roots = [Path(root) for root, _, _ in runs]
    names = _names(roots)
    identities = [run_identity(root) for root in roots]
    seen: dict[tuple[str, str], int] = {}
    rows: list[dict[str, Any]] = []
    index: dict[int, int] = {}  # id(row) -> its run's index
    sources: dict[str, tuple[int, str]] = {}
    counts, duplicates = [0] * len(runs), [0] * len(runs)
    warnings: list[str] = []
    for i, (_, given, _) in enumerate(runs):
        hashes = line_hashes(roots[i])
        for row in given:
            ident = (identities[i], row["key"])
            if ident in seen:
                duplicates[i] += 1
                continue
            seen[ident] = i
            key = f"{row['key']}@{identities[i][:SHORT]}"
            new = {**row, "key": key, "source_key": row["key"], "run": names[i],
                   "content_hash": hashes.get(row["key"])}
            if isinstance(row.get("release_key"), str):
                new["release_key"] = f"{row['release_key']}@{identities[i][:SHORT]}"
                new["source_release_key"] = row["release_key"]
            rows.append(new)
            index[id(new)] = i
            sources[key] = (i, row["key"])
            counts[i] += 1
    for i, n in enumerate(duplicates):
        if n:
            first = sorted({names[seen[(identities[i], r["key"])]] for r in runs[i][1]
                            if seen.get((identities[i], r["key"])) != i})
            warnings.append(f"{names[i]}: {n} row(s) are the same experiments (same secret and matchup) as rows "
                            f"of {', '.join(first)}: counted once")
    the_runs = tuple(Run(roots[i], names[i], identities[i], counts[i], duplicates[i]) for i in range(len(runs)))

    definitions: dict[str, list[str]] = {}
    for r in rows:
        d = _definition(r, "track", the_runs[index[id(r)]])
        if d not in definitions.setdefault(r["track"], []):
            definitions[r["track"]].append(d)
    tracks: dict[str, list[str]] = {}
    for name, ds in definitions.items():
        tracks[name] = [name] if len(ds) == 1 else [f"{name}@{d[:SHORT]}" for d in ds]
        if len(ds) > 1:
            holders = {d: sorted({the_runs[index[id(r)]].name for r in rows if r["track"] == name
                                  and _definition(r, "track", the_runs[index[id(r)]]) == d}) for d in ds}
            warnings.append(f"track {name!r} has {len(ds)} definitions across the runs (dataset, model, recipe, game "
                            f"or versions differ): shown apart as "
                            + ", ".join(f"{name}@{d[:SHORT]} ({', '.join(holders[d])})" for d in ds))
    for r in rows:
        ds = definitions[r["track"]]
        if len(ds) > 1:
            r["source_track"] = r["track"]
            r["track"] = f"{r['track']}@{_definition(r, 'track', the_runs[index[id(r)]])[:SHORT]}"
    by_track: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_track.setdefault(r["track"], []).append(r)
    for name, rs in by_track.items():
        _rename(rs, "defense_label", "defense", the_runs, index, warnings, name)
        _rename(rs, "attack_label", "attack", the_runs, index, warnings, name)
    audits = tuple(a if a is not None else Audit({}) for _, _, a in runs)
    return Merged(the_runs, rows, sources, audits, warnings, tracks)


def check_runs(run_dirs: Sequence[Path | str]) -> list[str]:
    """Problems with the run directories given to a merge, one line each: not a directory, no results.jsonl, a
    directory given twice, a malformed secret file."""
    problems, seen = [], set()
    for d in map(Path, run_dirs):
        if not d.is_dir():
            problems.append(f"{d}: no results.jsonl here (not a directory)")
        elif not (d / "results.jsonl").exists():
            problems.append(f"{d}: no results.jsonl here")
        elif d.resolve() in seen:
            problems.append(f"{d}: given twice")
        else:
            seen.add(d.resolve())
            try:
                run_identity(d)
            except RunDirError as exc:
                problems.append(str(exc))
    return problems
