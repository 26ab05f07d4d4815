"""``arena publish RUN... --out DIR``: a static site of a benchmark, for a group to put on any web server.

Plain HTML and one CSS file, no script and nothing fetched from elsewhere, rendered from the Jinja2 templates in
``arena/results/publish_templates/`` with autoescape on (every string from a plugin, a scenario or a row is
escaped where it is shown):

* ``index.html``: the runs merged, the tracks (each with the hash of its definition), the DP audit's verdicts,
  the warnings of the merge and the downloads;
* ``tracks/<track>.html``: a track's board (the ranking metric and those beside it, their intervals, rankings,
  failures and violations), the track as its runs' scenarios wrote it, and every row with its audit verdict and
  its content hash;
* ``methods/<kind>-<name>.html``: one page per defense and attack plugin: its configurations (parameters,
  plugin versions, definition hashes), the runs and tracks it played in, and its cells;
* downloads: ``leaderboard.csv`` and ``leaderboard.json`` (every metric with its interval), ``rows.jsonl`` (every
  row as its run wrote it, plus ``run``, ``content_hash`` and the merged key, track and labels), ``audit.json``;
* ``manifest.json``: the SHA-256 of every other file of the site.

A row's content hash is the SHA-256 of its line in its run's ``results.jsonl`` (without the newline), so a reader
holding the run directory can check any published number. The site is a function of the rows alone: publishing
the same runs twice writes the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from arena._version import __version__
from arena.contracts.metric import fpr_level, nonmembers_key
from arena.pipeline.store import _atomic_write
from arena.results import leaderboard
from arena.results.audit import Audit, audit_lines, violation_findings
from arena.results.leaderboard import NOT_RESOLVABLE, TrackBoard
from arena.results.merge import line_hashes

TEMPLATES = Path(__file__).parent / "publish_templates"
KINDS = ("defense", "attack")


def fmt(value: object, digits: int = 3) -> str:
    """A number for the page: fixed digits, '—' for none or NaN."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return "—" if math.isnan(value) else f"{value:.{digits}f}"
    return str(value)


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["fmt"] = fmt
    return env


class Slugs:
    """File-name-safe, unique names ('clash@52c8772c' → 'clash-52c8772c'), the same for the same name."""

    def __init__(self) -> None:
        self._of: dict[str, str] = {}

    def __call__(self, name: str) -> str:
        if name not in self._of:
            base = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "x"
            slug, k = base, 2
            while slug in self._of.values():
                slug, k = f"{base}-{k}", k + 1
            self._of[name] = slug
        return self._of[name]


def _table(df: pd.DataFrame, index_name: str) -> dict[str, Any]:
    """A DataFrame as the templates' table: headers and formatted cells."""
    return {"headers": [index_name, *map(str, df.columns)],
            "rows": [[str(i), *(fmt(v.item() if hasattr(v, "item") else v) for v in df.loc[i].tolist())]
                     for i in df.index]}


def _board_tables(board: TrackBoard) -> dict[str, Any]:
    cells = board.cells.copy()
    cells.insert(0, "utility", [fmt(float(u)) for u in board.utility])
    cells.insert(1, "claimed ε", [f"{board.claimed[d]:.4g}" if d in board.claimed else "—" for d in cells.index])
    return {
        "main": _table(cells, "defense"),
        "beside": [(m, _table(board.grids[m].cells, "defense")) for m in board.beside if m in board.grids],
        "intervals": [(m, _table(leaderboard.interval_table(board, m), "defense")) for m in board.shown
                      if m in board.grids],
        "attack_ranking": _table(board.attack_ranking, "attack"),
        "defense_ranking": _table(board.defense_ranking, "defense"),
    }


def _value(row: Mapping[str, Any], metric: str) -> str:
    """A row's value of ``metric`` for the rows table ('n/r' where its non-members cannot resolve the FPR)."""
    metrics = row.get("metrics") or {}
    if metric not in metrics:
        return "—"
    v = metrics[metric]
    n = metrics.get(nonmembers_key(metric))
    if v is None or not leaderboard.resolvable(metric, n if isinstance(n, int) else None):
        return NOT_RESOLVABLE if fpr_level(metric) is not None or v is None else fmt(v)
    return fmt(float(v)) if isinstance(v, (int, float)) else str(v)


def _track_definitions(rows: list[dict[str, Any]], run_roots: Mapping[str, Path]) -> list[dict[str, Any]]:
    """Each definition of a track: its hash, the runs holding it, and the track's entry in the first such run's
    scenario file (as kept in the run directory; None where it cannot be read)."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        digest = (r.get("definition") or {}).get("track") or "(not recorded)"
        entry = out.setdefault(digest, {"hash": digest, "runs": [], "yaml": None, "scenario": r.get("scenario")})
        if r.get("run") is not None and r["run"] not in entry["runs"]:
            entry["runs"].append(r["run"])
    for entry in out.values():
        name = next((r.get("source_track", r["track"]) for r in rows), "")
        for run in entry["runs"]:
            path = run_roots.get(run, Path("/nonexistent")) / "scenarios" / f"{entry['scenario']}.yaml"
            try:
                scenario = yaml.safe_load(path.read_text(encoding="utf-8"))
                track = next(t for t in scenario["tracks"] if t.get("name") == name)
            except (OSError, yaml.YAMLError, KeyError, TypeError, StopIteration, AttributeError):
                continue
            entry["yaml"] = yaml.safe_dump(track, sort_keys=False, allow_unicode=True)
            entry["source"] = f"{run}: scenarios/{path.name}"
            break
    return list(out.values())


def _methods(rows: list[dict[str, Any]], slugs: Slugs) -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, plugin name) → what its page shows: configurations, versions, runs, tracks."""
    methods: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        for kind in KINDS:
            name = str(r.get(kind) or r.get(f"{kind}_label"))
            page = methods.setdefault((kind, name), {"kind": kind, "name": name, "slug": slugs(f"{kind}-{name}"),
                                                     "configs": {}, "runs": [], "tracks": [], "versions": {}})
            label = r[f"{kind}_label"]
            digest = (r.get("definition") or {}).get(kind) or "(not recorded)"
            config = page["configs"].setdefault((r["track"], label), {
                "track": r["track"], "label": label, "hash": digest,
                "params": json.dumps(r.get(f"{kind}_params") or {}, sort_keys=True, indent=1),
                "rows": 0, "seeds": set(), "runs": []})
            config["rows"] += 1
            config["seeds"].add((r.get("run"), r.get("seed")))
            if r.get("run") not in config["runs"]:
                config["runs"].append(r.get("run"))
            for field, text in (r.get("versions") or {}).items():
                if field == kind or field.startswith(f"{kind}_") or field.startswith(f"{kind}."):
                    page["versions"].setdefault(field, [])
                    if text not in page["versions"][field]:
                        page["versions"][field].append(str(text))
            for attr, value in (("runs", r.get("run")), ("tracks", r["track"])):
                if value not in page[attr]:
                    page[attr].append(value)
    for page in methods.values():
        page["configs"] = [{**c, "seeds": len(c["seeds"])} for c in page["configs"].values()]
    return methods


def _method_cells(page: Mapping[str, Any], boards: list[TrackBoard]) -> list[dict[str, Any]]:
    """The cells of a method's configurations on each track's board (its row or column of the ranking metric)."""
    out = []
    labels = {(c["track"], c["label"]) for c in page["configs"]}
    for b in boards:
        if page["kind"] == "defense":
            mine = [d for d in b.cells.index if (b.track, d) in labels]
            table = b.cells.loc[mine] if mine else None
        else:
            mine = [a for a in b.cells.columns if (b.track, a) in labels]
            table = b.cells[mine] if mine else None
        if table is not None:
            out.append({"track": b.track, "metric": b.metric, "table": _table(table, "defense")})
    return out


def _rows_jsonl(rows: Iterable[Mapping[str, Any]]) -> str:
    """Every row (labelled as its scenario labels it now), with ``run``, ``content_hash`` (of its line in its
    run's results.jsonl) and what a merge renamed, one JSON object a line."""
    return "".join(json.dumps(dict(r), sort_keys=True, default=str) + "\n" for r in rows)


def _audit_json(audit: Audit, findings: Mapping[str, str]) -> str:
    return json.dumps({
        "games": {name: {"tested": g.tested, "violations": len(g.violations), "lines": list(g.lines),
                         "not_auditable": list(g.missing)} for name, g in audit.games.items()},
        "violations": dict(sorted(findings.items())),
    }, indent=2, sort_keys=True)


def publish(results: Any, out: Path | str) -> Path:
    """Write the site of ``results`` (an ``arena.Results``, one run or several merged) into ``out`` (created; the
    site's own files are replaced, nothing else there is touched) and return the path of its index page."""
    out = Path(out)
    rows = [dict(r) for r in results.rows]
    runs = getattr(getattr(results, "merged", None), "runs", None)
    run_info: list[dict[str, Any]]
    if runs is None:  # one run directory: its rows named by it, its keys its own
        name = Path(results.run_dir).resolve().name
        hashes = line_hashes(results.run_dir)
        rows = [{**r, "run": name, "content_hash": hashes.get(r["key"])} for r in rows]
        run_info = [{"name": name, "rows": len(rows), "duplicates": 0, "root": Path(results.run_dir)}]
    else:
        run_info = [{"name": r.name, "rows": r.rows, "duplicates": r.duplicates, "root": r.root} for r in runs]
    run_roots = {r["name"]: r["root"] for r in run_info}
    for r in run_info:
        mine = [row for row in rows if row.get("run") == r["name"]]
        r["scenarios"] = sorted({str(row.get("scenario")) for row in mine})
        r["arena"] = sorted({str((row.get("versions") or {}).get("arena", "?")) for row in mine})
    audit: Audit = results.audit
    findings = violation_findings(audit)
    boards = results.boards()
    slugs = Slugs()
    methods = _methods(rows, slugs)
    method_link = {(k, n): f"../methods/{p['slug']}.html" for (k, n), p in methods.items()}
    label_links = {(kind, r["track"], r[f"{kind}_label"]): method_link[kind, str(r.get(kind) or r[f"{kind}_label"])]
                   for r in rows for kind in KINDS}
    env = _environment()
    common = {"version": __version__, "css": "../style.css"}
    files: dict[str, str] = {}

    tracks = []
    for b in boards:
        mine = [r for r in rows if r["track"] == b.track]
        track_slug = slugs(f"track-{b.track}")
        runs_here = list(dict.fromkeys(r.get("run") for r in mine))
        definitions = _track_definitions(mine, run_roots)
        tracks.append({"name": b.track, "slug": track_slug, "game": b.game, "metric": b.metric, "seeds": b.n_seeds,
                       "defenses": len(b.cells.index), "attacks": len(b.cells.columns), "runs": runs_here,
                       "hashes": [d["hash"] for d in definitions], "violations": len(b.violations)})
        table_rows = [{
            "run": r.get("run"), "seed": r.get("seed"), "defense": r["defense_label"], "attack": r["attack_label"],
            "defense_link": label_links["defense", b.track, r["defense_label"]],
            "attack_link": label_links["attack", b.track, r["attack_label"]],
            "status": r["status"], "value": _value(r, b.metric), "utility": fmt(r.get("utility")),
            "audit": findings.get(r["key"], ""), "hash": r.get("content_hash") or "—",
            "key": r.get("source_key", r["key"]),
        } for r in sorted(mine, key=lambda r: (r["defense_label"], r["attack_label"], str(r.get("run")),
                                               r.get("seed", 0)))]
        files[f"tracks/{track_slug}.html"] = env.get_template("track.html.j2").render(
            **common, board=b, tables=_board_tables(b), definitions=definitions, rows=table_rows,
            links={**{a: label_links["attack", b.track, a] for a in b.cells.columns},
                   **{d: label_links["defense", b.track, d] for d in b.cells.index}})
    for page in methods.values():
        files[f"methods/{page['slug']}.html"] = env.get_template("method.html.j2").render(
            **common, page=page, cells=_method_cells(page, boards),
            track_links={t["name"]: f"../tracks/{t['slug']}.html" for t in tracks})
    downloads = [("leaderboard.csv", "one line per track × defense × attack: every metric's mean and interval"),
                 ("leaderboard.json", "the boards: cells, intervals, rankings, failures, violations"),
                 ("rows.jsonl", "every result row, with its run and content hash"),
                 ("audit.json", "the DP audit: each game's verdicts and the violating matchups"),
                 ("manifest.json", "the SHA-256 of every file of this site")]
    files["leaderboard.csv"] = leaderboard.render_csv(boards)
    files["leaderboard.json"] = leaderboard.render_json(boards) + "\n"
    files["rows.jsonl"] = _rows_jsonl(rows)
    files["audit.json"] = _audit_json(audit, findings) + "\n"
    files["style.css"] = (TEMPLATES / "style.css").read_text(encoding="utf-8")
    warnings = list(getattr(results, "warnings", []))  # the boards' own warnings are on their track's page
    files["index.html"] = env.get_template("index.html.j2").render(
        **{**common, "css": "style.css"}, runs=run_info, tracks=tracks, methods=sorted(
            methods.values(), key=lambda p: (p["kind"], p["name"])), audit_lines=audit_lines(audit),
        tested=audit.tested, violations=len(audit.violations), not_auditable=len(audit.missing_arrays),
        warnings=warnings, downloads=downloads, n_rows=len(rows))
    manifest = {name: hashlib.sha256(text.encode()).hexdigest() for name, text in sorted(files.items())}
    files["manifest.json"] = json.dumps({"arena": __version__, "files": manifest}, indent=2, sort_keys=True) + "\n"

    for folder in ("tracks", "methods"):  # the site's own folders: no page of an earlier publish is left behind
        if (out / folder).is_dir():
            shutil.rmtree(out / folder)
    for name, text in files.items():
        _write(out / name, text)
    return out / "index.html"


def _write(path: Path, text: str) -> None:
    """``text`` into ``path``, atomically (a reader never sees half a page)."""
    _atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))

