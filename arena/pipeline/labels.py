"""Labels of defense and attack configurations: short, and saying what differs.

An entry's ``label:`` (short and printable: ``arena.contracts.spec.EntryRef``; unique per track: the plan) names
its configuration (its ε appended when the entry expands into several, e.g. one per ε). Without one, a
configuration is labelled by its plugin's name plus only the parameters that differ between the configurations of
that plugin on the track (a defense's recipe fields as ``training.<field>``), and its target ε, when it has one:
``dpsgd(eps=8)``, ``lira(shadows=64)``, ``nonprivate(training.epochs=40)``.

Labels are for people: matchup keys come from the parameters, never from labels, so relabelling replays nothing.
The full parameters are in every row (``defense_params``, ``attack_params``), in the leaderboard's CSV and JSON
and in the report's legend (``legend``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from arena.pipeline.store import content_key
from arena.pipeline.text import printable

HIDDEN = frozenset({"epsilons"})
"""Parameters never shown in a label (a sweep's list of budgets: its configuration's ε is shown as ``eps=``)."""


@dataclass(frozen=True)
class Labelled:
    """One configuration to label: its plugin, its parameters (flattened), its target ε, the entry it came from
    and that entry's ``label:``."""

    name: str
    params: dict[str, Any]
    epsilon: float | None = None
    entry: int = 0
    label: str | None = None


def flatten(params: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'training': {'augment': {'crop': 4}}} -> {'training.augment.crop': 4}."""
    out: dict[str, Any] = {}
    for k, v in params.items():
        if isinstance(v, dict) and v:
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def value_text(v: Any) -> str:
    """A parameter's value as a label shows it: printable (an attack's validator may return any string; a label
    reaches terminals and logs), newlines escaped too."""
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, str):
        return printable(v).replace("\n", "\\n").replace("\t", "\\t")
    return json.dumps(v, sort_keys=True, separators=(",", ":"), default=str)


def _differing(configs: list[Labelled]) -> list[str]:
    """The parameter names whose values are not the same in every configuration (sorted)."""
    names = sorted({k for c in configs for k in c.params} - HIDDEN)
    return [k for k in names
            if len({value_text(c.params[k]) if k in c.params else "\0missing" for c in configs}) > 1]


def _compose(name: str, config: Labelled, keys: list[str]) -> str:
    parts = [f"eps={config.epsilon:g}"] if config.epsilon is not None else []
    parts += [f"{value_text(k)}={value_text(config.params[k])}" for k in keys if k in config.params]
    return f"{name}({', '.join(parts)})" if parts else name


def labels(configs: list[Labelled]) -> list[str]:
    """One label per configuration of one track's defenses (or attacks), in order."""
    by_plugin: dict[str, list[Labelled]] = {}
    by_entry: dict[int, list[Labelled]] = {}
    for c in configs:
        by_plugin.setdefault(c.name, []).append(c)
        by_entry.setdefault(c.entry, []).append(c)
    out = []
    for c in configs:
        if c.label is None:
            out.append(_compose(c.name, c, _differing(by_plugin[c.name])))
        elif len(by_entry[c.entry]) == 1:
            out.append(c.label)
        else:  # one labelled entry standing for several configurations: say which one
            out.append(_compose(c.label, c, _differing(by_entry[c.entry])))
    return out


def params_text(params: dict[str, Any] | None) -> str:
    """Every parameter as 'k=v', flattened, in name order: what a legend shows beside a label."""
    flat = flatten(params or {})
    return ", ".join(f"{value_text(k)}={value_text(v)}" for k, v in sorted(flat.items())) or "(defaults)"


def legend_entries(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{"defense": {label: {"name", "params", "epsilon"}}, "attack": {label: {"name", "params"}}}`` from result
    rows (the first row of each label), in the order of the rows."""
    out: dict[str, dict[str, dict[str, Any]]] = {"defense": {}, "attack": {}}
    for r in rows:
        d = r.get("defense_label")
        if d is not None and d not in out["defense"]:
            out["defense"][d] = {"name": r.get("defense"), "params": r.get("defense_params") or {},
                                 "epsilon": r.get("epsilon")}
        a = r.get("attack_label")
        if a is not None and a not in out["attack"]:
            out["attack"][a] = {"name": r.get("attack"), "params": r.get("attack_params") or {}}
    return out


def legend(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The report's legend table: one line per label of the track's defenses, then of its attacks, with the
    plugin and its full parameters (headers, cells)."""
    entries = legend_entries(rows)
    body = [["defense", label, e["name"] or "", params_text(e["params"])] for label, e in entries["defense"].items()]
    body += [["attack", label, e["name"] or "", params_text(e["params"])] for label, e in entries["attack"].items()]
    return ["", "label", "plugin", "parameters"], body


def assign(source: str, where: str, kind: str, configs: list[Any], named: list[Labelled],
           problems: list[str]) -> list[Any]:
    """``configs`` (defense or attack configurations of one track, ``where``) with their labels; a configuration
    listed twice, or one label given to configurations of two entries, is a problem."""
    seen: set[str] = set()
    for c in configs:
        identity = content_key([c.name, c.params, getattr(c, "training", None)])
        if identity in seen:
            problems.append(f"{source}: {where}: the same {kind} configuration appears twice")
            return configs
        seen.add(identity)
    out: list[Any] = []
    first: dict[str, int] = {}
    for c, n, label in zip(configs, named, labels(named)):
        if label in first and first[label] != n.entry:
            problems.append(f"{source}: {where}[{n.entry}].label: {label!r} is already the label of "
                            f"{where}[{first[label]}]; labels are unique among a track's {kind}s")
        first.setdefault(label, n.entry)
        out.append(dataclasses.replace(c, label=label))
    return out
