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
from typing import TYPE_CHECKING, Any, TextIO, cast

import pandas as pd

from arena.pipeline.row import FRAME_COLUMNS, STATUSES
from arena.pipeline.scenario import ScenarioError

if TYPE_CHECKING:  # a type only: the membership game's module loads when ``evaluate`` is called
    from arena.games.membership.evaluate import Evaluation

EXIT_OK, EXIT_FAILED, EXIT_INPUT, EXIT_VIOLATION = 0, 1, 2, 3
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")

IDENTITY = FRAME_COLUMNS
"""The first columns of ``Results.frame()`` (``arena.pipeline.row``: the matchup's identity, status, utility, seconds
and error), the metrics after them."""


class UnknownNameError(ValueError):
    """An unknown metric or track was asked for; ``known`` lists the names there are."""

    def __init__(self, kind: str, name: str, known: Sequence[str]) -> None:
        self.kind, self.name, self.known = kind, name, list(known)
        super().__init__(f"unknown {kind} {name!r}; known: {', '.join(self.known) or '(none)'}")


class Results:
    """A run directory's results: the rows, the DP audit, the leaderboard and the report.

    The rows are those of the scenario as run: the latest row of each matchup the run directory's last run
    planned (``RUN_DIR/matchups.json``), labelled as it labels them; rows of other keys (superseded by another
    plugin version or source, other parameters, another scenario) stay in results.jsonl as history
    (``frame(history=True)``, ``arena leaderboard --history``) and are never averaged in. ``keys`` restricts them
    further (None: no further). ``warnings`` are lines the run set aside or wants the user to see.
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
        """The latest result row of each current matchup (a re-run replaces an earlier failure)."""
        from arena.results.leaderboard import latest_rows

        rows = latest_rows(self.store.current_rows())
        return rows if self.keys is None else [r for r in rows if r["key"] in self.keys]

    def history(self) -> list[dict[str, Any]]:
        """The latest row of every matchup key the run directory holds, each with ``superseded`` (True: not a
        matchup of the scenario as run; it is never part of ``rows``)."""
        from arena.results.leaderboard import latest_rows

        return latest_rows(self.store.history_rows())

    @cached_property
    def audit(self):  # noqa: ANN201 - arena.results.audit.Audit, imported lazily
        from arena.results.audit import audit_rows
        from arena.results.kept import kept_audit

        return kept_audit(self.run_dir, self.rows, lambda: audit_rows(self.rows, self.arrays()))

    def arrays(self):  # noqa: ANN201 - arena.contracts.arrays.ArrayLoader
        """The loader of each matchup's saved arrays (scores and membership, ...) by matchup key."""
        from arena.results.audit import saved_arrays

        return saved_arrays(self.store)

    def draws(self):  # noqa: ANN201 - arena.results.leaderboard.DrawLoader
        """The loader of each matchup's bootstrap draws of its metrics (saved when it was scored) by matchup key."""
        return self.store.load_draws

    def rank_by(self) -> dict[str, str]:
        """Scenario name → its ``rank_by`` (from the scenario files kept in the run directory)."""
        from arena.results import leaderboard

        return leaderboard.rank_by_of(self.run_dir)

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

    def frame(self, history: bool = False) -> pd.DataFrame:
        """One row per matchup: its identity, status, utility and seconds, then every metric as a column (NaN where
        a matchup has none, or where its non-members cannot resolve a TPR@FPR). ``history``: every matchup key
        the run directory holds, superseded ones too, with the columns ``superseded`` and ``versions.<plugin>``
        (which code made each row) after the identity."""
        rows = self.history() if history else self.rows
        kinds = list(dict.fromkeys(k for r in rows for k in (r.get("versions") or {}))) if history else []
        columns = [*IDENTITY, "superseded", *(f"versions.{k}" for k in kinds)] if history else list(IDENTITY)
        records = []
        for r in rows:
            rec = {k: r.get(k) for k in IDENTITY}
            if history:
                rec["superseded"] = bool(r.get("superseded"))
                rec.update({f"versions.{k}": (r.get("versions") or {}).get(k) for k in kinds})
            for name, value in (r.get("metrics") or {}).items():
                rec[name] = value
            records.append(rec)
        frame = pd.DataFrame.from_records(records, columns=columns) if not records else \
            pd.DataFrame.from_records(records)
        for col in frame.columns[len(columns):]:
            if frame[col].map(lambda v: v is None or isinstance(v, (int, float))).all():
                frame[col] = pd.to_numeric(frame[col], errors="coerce")
        return frame

    def boards(self, metric: str | None = None, track: str | None = None):  # noqa: ANN201 - list[TrackBoard]
        """The leaderboard's boards: every track (or ``track``), ranked by ``metric`` or the scenarios' ``rank_by``
        (tracks without ``metric`` are left out). Unknown names raise ``UnknownNameError`` listing the known."""
        from arena.results import leaderboard

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
        rank_by = metric if metric is not None else self.rank_by()
        return leaderboard.build(rows, self.findings(), rank_by=rank_by, arrays=self.arrays(),
                                 draws=self.draws())

    def findings(self) -> dict[str, str]:
        """The DP audit's finding per violating matchup key, as the boards mark them: kept in the run directory
        with the digest of the rows and code they came from (``leaderboard.findings``), audited again when it
        differs."""
        from arena.results.leaderboard.findings import cached_findings

        def audit() -> dict[str, str]:
            from arena.results.audit import violation_findings

            return dict(violation_findings(self.audit))

        return cached_findings(self.run_dir, self.rows, audit)

    def leaderboard(self, metric: str | None = None, track: str | None = None) -> pd.DataFrame:
        """One row per track × defense × attack: the ranking metric, then every metric's mean with its 95% interval
        (``_low``, ``_high``; 'n/r' where the non-members cannot resolve an FPR), utility and claimed ε."""
        from arena.results.leaderboard import long_rows

        return pd.DataFrame(long_rows(self.boards(metric, track)))

    def report(self, formats: Sequence[str] = ()) -> Path:
        """Write ``RUN_DIR/report/index.html`` (and its figures in the vector ``formats``, any of "svg" and "pdf",
        under ``report/figures/``) and return its path."""
        from arena.results.report.html import write_report

        return write_report(self.run_dir, formats)

    def publish(self, out: Path | str) -> Path:
        """Write a static site of these results (``arena.results.publish``) into ``out``; return its index page."""
        from arena.results.publish import publish

        return publish(self, out)


class MergedResults(Results):
    """Several run directories as one benchmark (``arena.results.merge``): rows of the same track, defense and
    attack definition pool their seeds; conflicting definitions are shown apart (``track@hash8``); the DP audit
    is each run's own. ``runs`` are the run directories, ``merged`` the merge (its warnings, renamed tracks)."""

    def __init__(self, run_dirs: Sequence[Path | str]) -> None:
        from arena.results.merge import check_runs, merge

        problems = check_runs(run_dirs)
        if problems:
            raise FileNotFoundError("; ".join(problems))
        self.runs = [Results(d) for d in run_dirs]
        self.merged = merge([(r.run_dir, r.rows, r.audit) for r in self.runs])
        self.run_dir = self.runs[0].run_dir
        self.store = self.runs[0].store
        self.keys = None
        self.warnings = [*(w for r in self.runs for w in r.warnings), *self.merged.warnings]
        self.written = 0

    def __repr__(self) -> str:
        counts = self.counts
        return (f"MergedResults({len(self.runs)} runs: {len(self.rows)} matchups, {counts['ok']} ok, "
                f"{counts['skipped']} skipped, {counts['failed']} failed)")

    @cached_property
    def rows(self) -> list[dict[str, Any]]:
        """Every run's rows, merged: keys ``key@run``, with ``source_key`` and ``run`` (the run's name)."""
        return self.merged.rows

    @cached_property
    def audit(self):  # noqa: ANN201 - arena.results.audit.Audit
        return self.merged.audit()

    def arrays(self):  # noqa: ANN201 - arena.contracts.arrays.ArrayLoader
        return self.merged.arrays()

    def draws(self):  # noqa: ANN201 - arena.results.leaderboard.DrawLoader
        return self.merged.draws()

    def findings(self) -> dict[str, str]:
        from arena.results.audit import violation_findings

        return dict(violation_findings(self.audit))  # each run's own audit, gathered (nothing kept)

    def rank_by(self) -> dict[str, str]:
        return self.merged.rank_by()

    def frame(self, history: bool = False) -> pd.DataFrame:
        """``Results.frame()`` with the column ``run`` (each row's run directory, by its name in the merge);
        ``history``: each run's own history frame, one after the other (never merged)."""
        if history:
            frames = [r.frame(history=True) for r in self.runs]
            for run, frame in zip(self.merged.runs, frames):
                frame.insert(0, "run", run.name)
            return pd.concat(frames, ignore_index=True)
        frame = super().frame()
        frame.insert(1, "run", [r["run"] for r in self.rows])
        return frame

    def report(self, formats: Sequence[str] = ()) -> Path:
        raise TypeError("a merged benchmark has no run directory of its own to write a report into; publish it "
                        "(Results.publish(out), arena publish RUN... --out DIR) or report each run")


def load(run_dir: Path | str | Sequence[Path | str]) -> Results:
    """The results of an existing run directory, or of several merged into one benchmark (a list of them:
    ``MergedResults``). ``FileNotFoundError`` names a directory without results."""
    if isinstance(run_dir, (str, Path)):
        return Results(run_dir)
    dirs = list(run_dir)
    if not dirs:
        raise ValueError("load: no run directory given")
    return Results(dirs[0]) if len(dirs) == 1 else MergedResults(dirs)


def evaluate(scores: Any, is_member: Any, *, decisions: Any = None, resamples: int = 1000, seed: int = 0,
             confidence: float = 0.95) -> Evaluation:
    """Bring your own scores: every membership metric of ``scores`` (higher means member; pass ``-loss`` for
    losses) against ``is_member`` (0/1), as a membership matchup computes them: AUC, advantage, TPR at 10/1/0.1 %
    FPR (None, shown ``n/r``, where the non-members cannot resolve it) and, given ``decisions``, the balanced
    accuracy; each with its ``confidence`` interval from ``resamples`` stratified bootstrap draws (seeded by
    ``seed``). Returns an ``Evaluation`` (``.metrics``, ``.intervals``, ``.table()``, ``.frame()``, ``.figure()``,
    ``.save(out)``); a ``ValueError`` (``EvaluationInputError``) names the field of a bad input."""
    from arena.games.membership.evaluate import evaluate as evaluate_scores

    return evaluate_scores(scores, is_member, decisions=decisions, resamples=resamples, seed=seed,
                           confidence=confidence)


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
        games |= {g for name in set(games) if name in registries().games.names()
                  for g in getattr(registries().games.get(name), "reports_metrics_of", ())}
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
    text = yaml.safe_dump(dict(scenario), sort_keys=False, allow_unicode=True)
    _keep_scenario(store, stem, text)
    return store.root / "scenarios" / f"{stem}.yaml"


def _archive(store: Any, path: Path) -> None:
    """Move a scenario file of the run directory to ``scenarios/history/<stem>-<hash>.yaml``: the scenario an
    earlier run played, which the superseded rows of results.jsonl came from."""
    import hashlib

    body = path.read_bytes()
    store.write_text(f"scenarios/history/{path.stem}-{hashlib.sha256(body).hexdigest()[:8]}.yaml",
                     body.decode("utf-8", "replace"))
    path.unlink()


def _keep_scenario(store: Any, name: str, text: str) -> None:
    """Write ``scenarios/<name>.yaml``, archiving a different one it replaces (``_archive``)."""
    target = store.root / "scenarios" / f"{name}.yaml"
    if target.exists() and target.read_text(encoding="utf-8", errors="replace") != text:
        _archive(store, target)
    if not target.exists():
        store.write_text(f"scenarios/{name}.yaml", text)


def _record_scenarios(store: Any, scenarios: Sequence[tuple[Path, Any]]) -> None:
    """``RUN_DIR/scenarios/`` holds the scenarios as run, one file each; those of earlier runs that this one does
    not play, or plays changed, are archived under ``scenarios/history/``."""
    names = set()
    for path, scenario in scenarios:
        names.add(scenario.name)
        target = store.root / "scenarios" / f"{scenario.name}.yaml"
        if Path(path).resolve() != target.resolve():
            _keep_scenario(store, scenario.name, Path(path).read_text(encoding="utf-8"))
    for old in sorted((store.root / "scenarios").glob("*.yaml")):
        if old.stem not in names:
            _archive(store, old)


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
    fresh: bool = False,
) -> Results:
    """Play every matchup of a scenario (a path, a list of paths, or a scenario as a dict, which is first written
    into ``out/scenarios/`` as YAML) into the run directory ``out`` (created; re-running resumes) and return its
    ``Results``: those of this scenario's matchups only (rows of earlier runs with other keys are history).
    Writes the report unless ``report=False``. ``fresh``: discard the run directory's cache of trained models and
    play every matchup again.

    Raises ``ScenarioError`` (all problems of invalid input, an ``address`` where no Ray cluster answers, before
    any work), ``arena.pipeline.store.RunDirError`` (a directory the arena did not write, or one another run
    holds), ``OSError`` (an unwritable directory) and ``KeyboardInterrupt`` (finished matchups are kept; run again
    to resume).
    """
    from arena.pipeline import sandbox
    from arena.pipeline.store import RunStore

    if workers is not None and workers < 1:
        raise ScenarioError(["workers: must be at least 1"])
    store = RunStore(out)
    if serial and not store.results_path.exists():  # a new serial run will play: its fork server (importing
        sandbox.start()  # torch in a process of its own) starts while the scenario is planned
    return _run(store, path_or_scenario, serial, workers, address, verbose, report, progress, fresh)


def _run(store: Any, path_or_scenario: str | Path | Mapping[str, Any] | Sequence[str | Path], serial: bool,
         workers: int | None, address: str | None, verbose: bool, report: bool, progress: TextIO | None,
         fresh: bool) -> Results:
    """``run``'s work, in the run directory ``store``."""
    from arena.pipeline import cluster, tournament
    from arena.pipeline.plan import plan
    from arena.pipeline.store import RunDirError

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
    if address and not serial:  # joined before anything is written: a bad address is an input problem
        cluster.connect(address, verbose=verbose)
    store.check_ours()
    store.root.mkdir(parents=True, exist_ok=True)
    with store.lock():
        store.mark()
        warnings = store.set_aside()
        if is_dict:
            p = plan([_scenario_file(store, cast(Mapping[str, Any], path_or_scenario))], local=address is None)
            problems = rank_by_problems(p.scenarios)
            if problems:
                raise ScenarioError(problems)
        _record_scenarios(store, p.scenarios)
        try:
            before = store.matchups()
        except RunDirError:  # a damaged record of the last run's matchups: this run rewrites it
            before = None
        written = tournament.run(p, store, serial=serial, workers=workers, address=address, verbose=verbose,
                                 progress=progress or sys.stderr, fresh=fresh)
        results = Results(store.root, None, warnings, len(written))
        page = store.root / "report" / "index.html"
        if report and (written or store.matchups() != before or not page.exists()):
            results.report()
    return results
