"""The membership game's part of the report: ROC curves, the audited matchups' ROC over their claim's replace-one
trade-off curve (drawn by the report from the panels handed over), the most exposed records, per-class TPR at low
FPR, and its rows of the DP audit. Templates in ``templates/``; the page hands over the context it renders them with.

Per-record risk: every saved matchup holds each challenge point's dataset row (``record``), its score, its label
and whether it was a member. A point's *rank* is the percentile of its score among that matchup's challenge
points (1.0 = the highest score, the most confidently called a member). Across seeds a record is a member in some
games and not in others; its exposure under a (defense, attack) is its mean rank over the seeds where it was a
member. Per class, the TPR at 1 % FPR is measured among that class's points (10 % when the class's non-members
cannot resolve 1 %; n/r when they cannot resolve 10 % either), averaged over seeds.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np
from markupsafe import Markup

from arena.contracts.metric import tpr_key
from arena.games.membership import figures
from arena.games.membership.metrics import score_metrics
from arena.games.membership.power import MAX_PAIRS
from arena.results.figures import MANY_CELLS, strongest_per_defense
from arena.results.leaderboard import NOT_RESOLVABLE

TOP_RECORDS = 3
CLASS_LEVELS = (0.01, 0.1)


@dataclass(frozen=True)
class RecordRisk:
    """One record's exposure under one (defense, attack): mean percentile rank over the seeds it was a member."""

    record: int
    label: int | None
    mean_rank: float
    times_member: int
    times_seen: int  # seeds in which it was a challenge point at all


def _pairs(rows: list[dict[str, Any]], arrays,  # noqa: ANN001 - an ArrayLoader
           cells: Collection[tuple[str, str]] | None = None) -> dict[tuple[str, str], list[dict[str, np.ndarray]]]:
    """(defense, attack) → each ok seed's saved arrays, of the ``cells`` given (None: every cell)."""
    out: dict[tuple[str, str], list[dict[str, np.ndarray]]] = {}
    for r in rows:
        if cells is not None and (r["defense_label"], r["attack_label"]) not in cells:
            continue
        saved = arrays(r["key"]) if r.get("status") == "ok" else None
        if saved is None or "scores" not in saved or "is_member" not in saved:
            continue
        out.setdefault((r["defense_label"], r["attack_label"]), []).append(
            {k: np.asarray(v).reshape(-1) for k, v in saved.items()})
    return out


def record_risk(seeds: list[dict[str, np.ndarray]], top: int = TOP_RECORDS) -> list[RecordRisk]:
    """The ``top`` records with the highest mean rank among the seeds where they were members (ties: more member
    seeds first, then the lower row index). Needs the ``record`` array (runs before it saved none: empty)."""
    if not seeds or any("record" not in saved for saved in seeds):
        return []
    from scipy.stats import rankdata  # here: importing scipy.stats costs 0.8 s

    records, pcts, members, labels = [], [], [], []
    for saved in seeds:  # vectorised over a seed's points; the seeds are concatenated
        scores = saved["scores"].astype(np.float64)
        records.append(saved["record"].astype(np.int64))
        pcts.append(rankdata(scores, method="average") / len(scores))
        members.append(saved["is_member"].astype(bool))
        labels.append(saved["label"].astype(np.int64) if "label" in saved else np.full(len(scores), -1))
    rec, pct, member, label = (np.concatenate(x) for x in (records, pcts, members, labels))
    ids, where, seen = np.unique(rec, return_inverse=True, return_counts=True)
    times = np.bincount(where, weights=member, minlength=len(ids))
    total = np.bincount(where, weights=np.where(member, pct, 0.0), minlength=len(ids))
    last_label = np.full(len(ids), -1)
    last_label[where] = label  # the label of a record's last appearance (the same in every seed)
    risks = [RecordRisk(int(ids[i]), None if last_label[i] < 0 else int(last_label[i]), float(total[i] / times[i]),
                        int(times[i]), int(seen[i])) for i in np.flatnonzero(times)]
    risks.sort(key=lambda x: (-x.mean_rank, -x.times_member, x.record))
    return risks[:top]


def class_level(n_nonmembers: int) -> float | None:
    """The lowest FPR of ``CLASS_LEVELS`` that ``n_nonmembers`` can resolve (1/n ≤ FPR), or None."""
    return next((lvl for lvl in CLASS_LEVELS if n_nonmembers > 0 and 1.0 / n_nonmembers <= lvl * (1 + 1e-9)), None)


def per_class_tpr(seeds: list[dict[str, np.ndarray]]) -> dict[int, tuple[float | None, float | None, int]]:
    """Class → (mean TPR over seeds at the level, the level, fewest non-members of the class in a seed). The level
    is the lowest of 1 % and 10 % that every seed's non-members of the class resolve; None when neither is."""
    classes = sorted({int(c) for s in seeds if "label" in s for c in s["label"]})
    out: dict[int, tuple[float | None, float | None, int]] = {}
    for c in classes:
        parts = []
        for s in seeds:
            if "label" not in s:
                continue
            mask = s["label"] == c
            member = s["is_member"].astype(bool)[mask]
            parts.append((s["scores"].astype(np.float64)[mask], member))
        fewest = min(int((~m).sum()) for _, m in parts)
        level = class_level(fewest)
        if level is None or any(int(m.sum()) == 0 for _, m in parts):
            out[c] = (None, level, fewest)
            continue
        values = [float(score_metrics(sc, m, (level,))[tpr_key(level)][0]) for sc, m in parts]
        out[c] = (float(np.mean(values)), level, fewest)
    return out


def _dataset(ctx: Any):  # noqa: ANN202 - the track's Dataset, or None
    """The track's dataset, loaded from the scenario kept in the run directory (None if that fails)."""
    from arena.pipeline.plan import load_dataset
    from arena.pipeline.scenario import ScenarioError, parse_scenario

    for path in sorted((ctx.store.root / "scenarios").glob("*.yaml")):
        try:
            scenario = parse_scenario(path)
        except (ScenarioError, OSError):
            continue
        for track in scenario.tracks:
            if track.name == ctx.board.track:
                try:
                    return load_dataset(track.dataset)
                except Exception:  # noqa: BLE001 - a dataset gone missing costs the images, not the report
                    return None
    return None


def strongest(board: Any, exposed: list[tuple[str, str, list[RecordRisk]]]) -> list[tuple[str, str, list[RecordRisk]]]:
    """Per defense, the exposed records under its strongest attack by the track's ranking metric (the first attack
    where no mean ranks them): one row of images per defense, so that the figure stays legible however many
    attacks the track has (the table beside it lists every pair)."""
    out = []
    for d in dict.fromkeys(d for d, _, _ in exposed):
        mine = [(a, risks) for dd, a, risks in exposed if dd == d]
        means = board.means.loc[d] if d in board.means.index else {}
        values = [float(means.get(a, np.nan)) for a, _ in mine]
        strength = [-np.inf if not np.isfinite(v) else (v if board.higher_is_better else -v) for v in values]
        a, risks = mine[int(np.argmax(strength))]  # the first of equals
        out.append((d, a, risks))
    return out


def section(ctx: Any) -> Markup:
    """ROC curves, the most exposed records (with images for an image dataset) and per-class TPR at low FPR."""
    board = ctx.board
    roc = figures.roc_curves(board, ctx.rows, ctx.arrays)
    roc_png = ctx.figures.save(roc, f"{board.track}-roc") if roc is not None else None
    summarised = board.means.size >= MANY_CELLS  # per defense, its strongest attack: the tables stay readable
    chosen = set(strongest_per_defense(board).items()) if summarised else None
    pairs = _pairs(ctx.rows, ctx.arrays, chosen)
    order = [(d, a) for d in board.means.index for a in board.means.columns if (d, a) in pairs]
    exposed = [(d, a, record_risk(pairs[d, a])) for d, a in order]
    exposed = [(d, a, risks) for d, a, risks in exposed if risks]
    records_png = None
    if exposed:
        dataset = _dataset(ctx)
        if dataset is not None and dataset.kind == "image":
            panels = [(f"{d} vs {a}", [(dataset.X[r.record], f"#{r.record}, y={r.label}, rank {r.mean_rank:.3f}")
                                       for r in risks]) for d, a, risks in strongest(board, exposed)]
            records_png = ctx.figures.save(figures.exposed_records(panels, dataset.shape),
                                           f"{board.track}-exposed-records")
    classes = {(d, a): per_class_tpr(pairs[d, a]) for d, a in order}
    labels = sorted({c for per in classes.values() for c in per})
    class_rows = []
    for (d, a), per in classes.items():
        cells = []
        for c in labels:
            value, level, _ = per.get(c, (None, None, 0))
            cells.append(NOT_RESOLVABLE if value is None else f"{value:.3f} @{level:.0%}")
        class_rows.append([d, a, *cells])
    exposed_rows = [[d, a, place, f"#{r.record}", "—" if r.label is None else r.label, f"{r.mean_rank:.3f}",
                     f"{r.times_member} of {r.times_seen}"]
                    for d, a, risks in exposed for place, r in enumerate(risks, start=1)]
    return ctx.render("membership.html.j2", track=board.track, roc_png=roc_png, exposed=bool(exposed),
                  exposed_rows=exposed_rows, records_png=records_png, class_labels=[f"class {c}" for c in labels],
                  class_rows=class_rows, top=TOP_RECORDS, summarised=summarised,
                  tradeoff=audited_rocs(ctx))


def audited_rocs(ctx: Any) -> Markup:
    """The audited ROC figure: per defense configuration and claim, the panel of its strongest attack (by the
    track's ranking metric), so that the figure stays legible however many attacks the track has; the table
    beside it reads every audited pair."""
    panels = tradeoff_panels(ctx)
    board = ctx.board
    best: dict[tuple[str | None, str], Any] = {}
    for p in panels:
        value = board.means.loc[p.defense, p.attack] if (p.defense in board.means.index and
                                                          p.attack in board.means.columns) else np.nan
        score = -np.inf if not np.isfinite(value) else (value if board.higher_is_better else -value)
        group = (p.defense, json.dumps(p.claim, sort_keys=True, default=str))
        if group not in best or score > best[group][0]:
            best[group] = (score, p)
    drawn = [p for p in panels if any(p is q for _, q in best.values())]
    why = (f"Drawn: each defense's strongest attack by {board.metric} ({len(drawn)} of {len(panels)} audited pairs; "
           "the table reads them all).") if len(drawn) < len(panels) else ""
    return ctx.tradeoff(panels, f"{board.track}-tradeoff-roc", drawn=drawn, why=why)


def tradeoff_panels(ctx: Any) -> list[Any]:
    """One panel per (defense, attack, claim) of the audited matchups (ok, claiming (ε, δ), scores saved), one
    curve per seed, drawn over the claim's **replace-one** trade-off curve: a member and a non-member swap."""
    groups: dict[tuple[str, str, str], list[tuple[dict[str, Any], Any]]] = {}
    for r in ctx.rows:
        claim = r.get("claim") or {}
        if r.get("status") != "ok" or claim.get("epsilon") is None or claim.get("delta") is None:
            continue
        saved = ctx.arrays(r["key"])
        if saved is None or "scores" not in saved or "is_member" not in saved:
            continue
        key = (r["defense_label"], r["attack_label"], json.dumps(claim, sort_keys=True, default=str))
        groups.setdefault(key, []).append((r, saved))
    panels = []
    for (defense, attack, _), members in sorted(groups.items(), key=lambda kv: (
            float(kv[1][0][0]["claim"]["epsilon"]), kv[0][0], kv[0][1])):
        members.sort(key=lambda rs: rs[0]["seed"])
        curves = tuple(ctx.RocCurve(f"seed {r['seed']}", saved["scores"], saved["is_member"]) for r, saved in members)
        panels.append(ctx.RocPanel(f"{defense} vs {attack}", members[0][0]["claim"], "replace_one", curves,
                                   defense=defense, attack=attack))
    return panels


def _audit_verdict(a: Any) -> str:
    if a.violation:
        return "VIOLATION"
    ceiling = max(a.lower_bound.max_certifiable, a.one_run.max_certifiable if a.one_run is not None else 0.0)
    if ceiling <= a.relation_epsilon:
        return "cannot refute: the claim is above what this sample could certify"
    return "consistent"


def audit_section(audit: Any, page: Any) -> Markup:
    """Every membership matchup against a claim, violations first: the replace-one ε tested, the held-out bound,
    the largest bound the held-out counts could certify."""
    fmt = page.fmt
    records = audit.records if audit is not None else ()
    rows, classes = [], []
    for a in sorted(records, key=lambda a: not a.violation):
        lb = a.lower_bound
        one_run = (f"{a.one_run.epsilon:.3f} ({a.one_run.correct}/{a.one_run.guesses} right of {a.one_run.m} "
                   f"pairs; ≤ {a.one_run.max_certifiable:.3f} certifiable)" if a.one_run is not None else "—")
        needed = f"{a.pairs_needed:,}" if a.pairs_needed is not None else f"none up to {MAX_PAIRS:,}"
        classes.append("violation" if a.violation else "")
        rows.append([a.track, a.defense_label, a.attack, a.seed, fmt(a.claimed_epsilon), f"{a.delta:g}",
                     f"{fmt(a.relation_epsilon)} ({a.relation_how})" if a.relation_how else fmt(a.relation_epsilon),
                     fmt(lb.epsilon), fmt(lb.max_certifiable),
                     f"{lb.n_members} + {lb.n_nonmembers} of {lb.n_members_total} + {lb.n_nonmembers_total}",
                     f"{lb.true_positives}, {lb.false_positives}" if lb.direction else "— (no evidence)",
                     one_run, needed, _audit_verdict(a)])
    return page.render("membership-audit.html.j2", membership_rows=rows, membership_classes=classes,
                       missing=list(audit.missing) if audit is not None else [])
