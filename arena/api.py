"""The Python API: ``arena.run(...)`` plays a tournament and returns its ``Results``; ``arena.load(run_dir)`` reads
one back. The command line (``arena run``, ``arena leaderboard``) is a thin layer over these.

    import arena
    results = arena.run("scenarios/quickstart.yaml", out="runs/quickstart")
    results.frame()                            # pandas DataFrame, one row per matchup, metrics as columns
    results.leaderboard(metric="tpr@1%fpr")    # one row per track × defense × attack, every metric with its interval
    results.report()                           # writes RUN_DIR/report/index.html and returns its path
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, TextIO

import pandas as pd

from arena.pipeline.row import FRAME_COLUMNS, STATUSES
from arena.pipeline.scenario import ScenarioError

EXIT_OK, EXIT_FAILED, EXIT_INPUT, EXIT_VIOLATION = 0, 1, 2, 3
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")

IDENTITY = FRAME_COLUMNS
"""The first columns of ``Results.frame()`` (``arena.pipeline.row``: the matchup's identity, status, utility, seconds and
error), the metrics after them."""


class UnknownNameError(ValueError):
    """An unknown metric or track was asked for; ``known`` lists the names there are."""

    def __init__(self, kind: str, name: str, known: Sequence[str]) -> None:
        self.kind, self.name, self.known = kind, name, list(known)
        super().__init__(f"unknown {kind} {name!r}; known: {', '.join(self.known) or '(none)'}")


class Results:
    """A run directory's results: the rows, the DP audit, the leaderboard and the report.

    ``keys`` restricts them to the matchups of one plan (what ``run`` played); None: every row of the directory.
    ``warnings`` are lines the run set aside or wants the user to see.
    """

    def __init__(self, run_dir: Path | str, keys: frozenset[str] | None = None, warnings: Sequence[str] = (),
                 written: int = 0) -> None:
        from arena.pipeline.store import RunStore

        self.run_dir = Path(run_dir)
        self.store = RunStore(self.run_dir)
        if not self.store.results_path.exists():
            raise FileNotFoundError(f"{self.run_dir}: no results.jsonl here")
        self.keys = keys
        self.warnings = list(warnings)
        self.written = written  # rows the run that made this object wrote (0 for ``load``)

    def __repr__(self) -> str:
        counts = self.counts
        return (f"Results({str(self.run_dir)!r}: {len(self.rows)} matchups, {counts['ok']} ok, "
                f"{counts['skipped']} skipped, {counts['failed']} failed)")

    @cached_property
    def rows(self) -> list[dict[str, Any]]:
        """The latest result row of each matchup (a re-run replaces an earlier failure)."""
        from arena.results.leaderboard import latest_rows

        rows = latest_rows(self.store.results())
        return rows if self.keys is None else [r for r in rows if r["key"] in self.keys]

    @cached_property
    def audit(self):  # noqa: ANN201 - arena.results.audit.Audit, imported lazily
        from arena.results.audit import audit_store

        return audit_store(self.store, self.rows)

    @property
    def counts(self) -> dict[str, int]:
        return {s: sum(r["status"] == s for r in self.rows) for s in STATUSES}

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["status"] == "failed"]

    @property
    def exit_status(self) -> int:
        """0 all ok, 1 some matchup failed (takes precedence), 3 the DP audit of any game found a violation."""
        if self.failed:
            return EXIT_FAILED
        return EXIT_VIOLATION if self.audit.violations else EXIT_OK

    def frame(self) -> pd.DataFrame:
        """One row per matchup: its identity, status, utility and seconds, then every metric as a column (NaN where
        a matchup has none, or where its non-members cannot resolve a TPR@FPR)."""
        records = []
        for r in self.rows:
            rec = {k: r.get(k) for k in IDENTITY}
            for name, value in (r.get("metrics") or {}).items():
                rec[name] = value
            records.append(rec)
        frame = pd.DataFrame.from_records(records, columns=list(IDENTITY)) if not records else \
            pd.DataFrame.from_records(records)
        for col in frame.columns[len(IDENTITY):]:
            if frame[col].map(lambda v: v is None or isinstance(v, (int, float))).all():
                frame[col] = pd.to_numeric(frame[col], errors="coerce")
        return frame

    def boards(self, metric: str | None = None, track: str | None = None):  # noqa: ANN201 - list[TrackBoard]
        """The leaderboard's boards: every track (or ``track``), ranked by ``metric`` or the scenarios' ``rank_by``
        (tracks without ``metric`` are left out). Unknown names raise ``UnknownNameError`` listing the known."""
        from arena.results import leaderboard
        from arena.results.audit import saved_arrays, violation_findings

        tracks = list(dict.fromkeys(r["track"] for r in self.rows))
        if track is not None and track not in tracks:
            raise UnknownNameError("track", track, tracks)
        rows = [r for r in self.rows if track is None or r["track"] == track]
        if metric is not None:
            known = leaderboard.known_metrics(rows)
            if metric not in known:
                raise UnknownNameError("metric", metric, known)
            with_metric = {r["track"] for r in rows if metric in (r.get("metrics") or {})}
            rows = [r for r in rows if r["track"] in with_metric]
        rank_by = metric if metric is not None else leaderboard.rank_by_of(self.run_dir)
        return leaderboard.build(rows, violation_findings(self.audit), rank_by=rank_by,
                                 arrays=saved_arrays(self.store))

    def leaderboard(self, metric: str | None = None, track: str | None = None) -> pd.DataFrame:
        """One row per track × defense × attack: the ranking metric, then every metric's mean with its 95% interval
        (``_low``, ``_high``; 'n/r' where the non-members cannot resolve an FPR), utility and claimed ε."""
        from arena.results.leaderboard import long_rows

        return pd.DataFrame(long_rows(self.boards(metric, track)))

    def report(self) -> Path:
        """Write ``RUN_DIR/report/index.html`` (and its figures) and return its path."""
        from arena.results.report.html import write_report

        return write_report(self.run_dir)


def load(run_dir: Path | str) -> Results:
    """The results of an existing run directory."""
    return Results(run_dir)


def rank_by_problems(parsed: Sequence[tuple[Path, Any]]) -> list[str]:
    """A scenario's ``rank_by`` must name a registered metric of one of its tracks' games."""
    from arena.plugins import registries

    metrics = registries().metrics
    problems = []
    for path, scenario in parsed:
        wanted = getattr(scenario, "rank_by", None)
        if wanted is None:
            continue
        games = {t.game.name for t in scenario.tracks}
        fitting = sorted(e.name for e in metrics if e.obj.game in games)
        if wanted not in fitting:
            problems.append(f"{path}: rank_by: unknown metric {wanted!r} for the games of this scenario "
                            f"({', '.join(sorted(games))}); known: {', '.join(fitting)}")
    return problems


def _scenario_file(store: Any, scenario: Mapping[str, Any]) -> Path:
    """Write a scenario given as a dict into the run directory as YAML; return its path."""
    import yaml

    name = scenario.get("name")
    stem = name if isinstance(name, str) and _SAFE_NAME.match(name) else "scenario"
    store.write_text(f"scenarios/{stem}.yaml", yaml.safe_dump(dict(scenario), sort_keys=False, allow_unicode=True))
    return store.root / "scenarios" / f"{stem}.yaml"


def run(
    path_or_scenario: str | Path | Mapping[str, Any] | Sequence[str | Path],
    out: str | Path,
    serial: bool = False,
    workers: int | None = None,
    address: str | None = None,
    *,
    verbose: bool = False,
    report: bool = True,
    progress: TextIO | None = None,
) -> Results:
    """Play every matchup of a scenario (a path, a list of paths, or a scenario as a dict, which is first written
    into ``out/scenarios/`` as YAML) into the run directory ``out`` (created; re-running resumes) and return its
    ``Results``. Writes the report unless ``report=False``.

    Raises ``ScenarioError`` (all problems of invalid input, before any work), ``arena.pipeline.store.RunDirError`` (a
    directory the arena did not write, or one another run holds), ``OSError`` (an unwritable directory) and
    ``KeyboardInterrupt`` (finished matchups are kept; run again to resume).
    """
    from arena.pipeline import tournament
    from arena.pipeline.plan import plan
    from arena.pipeline.store import RunStore

    if workers is not None and workers < 1:
        raise ScenarioError(["workers: must be at least 1"])
    store = RunStore(out)
    is_dict = isinstance(path_or_scenario, Mapping)
    if is_dict:
        paths: list[Path] = []
    elif isinstance(path_or_scenario, (str, Path)):
        paths = [Path(path_or_scenario)]
    else:
        paths = [Path(p) for p in path_or_scenario]
    if not is_dict:  # every problem of the input before the run directory is touched
        p = plan(paths, local=address is None)
        problems = rank_by_problems(p.scenarios)
        if problems:
            raise ScenarioError(problems)
    store.check_ours()
    store.root.mkdir(parents=True, exist_ok=True)
    with store.lock():
        store.mark()
        warnings = store.set_aside()
        if is_dict:
            p = plan([_scenario_file(store, path_or_scenario)], local=address is None)
            problems = rank_by_problems(p.scenarios)
            if problems:
                raise ScenarioError(problems)
        for path, scenario in p.scenarios:
            target = store.root / "scenarios" / f"{scenario.name}.yaml"
            if Path(path).resolve() != target.resolve():
                store.write_text(f"scenarios/{scenario.name}.yaml", Path(path).read_text(encoding="utf-8"))
        written = tournament.run(p, store, serial=serial, workers=workers, address=address, verbose=verbose,
                                 progress=progress or sys.stderr)
        results = Results(store.root, frozenset(m.key for m in p.matchups), warnings, len(written))
        page = store.root / "report" / "index.html"
        if report and (written or not page.exists()):
            results.report()
    return results
