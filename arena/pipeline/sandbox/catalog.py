"""Third-party plugins looked at, and attacks' parameters validated, in the sandbox: no attack code in the arena.

Before the arena imports a third-party plugin it asks the sandbox what the plugin is (``catalog``, installed into
``arena.plugins`` when this package is imported): a sandboxed process (as an attack's: its own user, limits, no
secret) imports each third-party entry point, and answers, as JSON, the hooks it implements and, for
``register_attacks``, each attack's declarations read statically (``static_attack``: name, game, threat model,
version, where its class is) or why they cannot be planned. An entry point that registers attacks only is then
never imported by the arena, which registers stand-ins built from those declarations
(``arena.plugins.sandboxed_attack``); one that registers anything else is the challenger's code and is imported
as before. ``validate`` checks the parameters of such attacks, every one of a plan in one sandboxed process:
their ``Params`` (a plugin's pydantic model, validators included) run there, and what comes back is the
parameters in JSON form or pydantic's errors (location, message, type), which the plan reports with file and
field. ``arena.pipeline.sandbox.tasks`` is the sandboxed side of both. Whatever comes back was in reach of the
plugin's code, so it is taken as data only: checked for shape, texts escaped and capped, names plain,
capabilities known (``_checked_entry``, ``_checked_answer``).

Which entry points the arena imports follows from that answer (``arena.plugins.load_plugins``): one that
registers, or claims to register, a defense, model, dataset, game or metric is the challenger's code by its own
account, and is imported here as every such plugin is, unless its distribution also registers attacks and is not
trusted by name, or lives in the untrusted site (``arena.trust``): then it is refused. A distribution whose
entry points kill the sandbox's process is found by asking for each distribution alone, and only it is broken.
"""

from __future__ import annotations

import importlib.metadata as md
import json
from typing import Any

from arena.pipeline.sandbox.limits import ERROR_CHARS, clip_text, printable
from arena.pipeline.sandbox.static import CAPABILITIES, AttackRef

TASK_SECONDS = 300.0
"""How long a sandboxed catalog or validation may take (importing plugins: torch, their dependencies)."""
PARAMS_BYTES = 1 << 20
"""The most JSON an attack's validated parameters may take."""
MAX_NAME = 200
"""The longest attack name the arena registers from the sandbox's answer."""
_TASK_REF = AttackRef(name="plugin sandbox", game="", threat_model=frozenset(), version="", entry=":")


def _ask(task: dict[str, Any]) -> Any:
    from arena.pipeline.sandbox.parent import AttackFailed, AttackProcess, ServerDied
    from arena.plugins import PluginLoadError

    try:
        with AttackProcess(_TASK_REF, task=task, guesses=(), timeout=TASK_SECONDS) as process:
            return process.answer()
    except (AttackFailed, ServerDied, OSError) as exc:  # a plugin that kills its process, or no sandbox at all
        raise PluginLoadError(f"the attack sandbox could not {task['task']} the third-party plugins: {exc}") \
            from None


def catalog(entry_points: list[md.EntryPoint]) -> dict[str, dict[str, Any]] | None:
    """What each third-party entry point registers, by ``distribution:name`` (``arena.plugins.Catalog``), found in
    a sandboxed process; None in an attack's own process (which imports its plugins itself)."""
    from arena.pipeline.sandbox.child import in_attack_process

    if in_attack_process():
        return None
    from arena.plugins import PluginLoadError

    listed = [[ep.dist.name if ep.dist else "unknown", ep.name, ep.value] for ep in entry_points]
    try:
        return _catalogued(listed)
    except PluginLoadError as exc:
        by_dist: dict[str, list[list[str]]] = {}
        for item in listed:
            by_dist.setdefault(item[0], []).append(item)
        if len(by_dist) < 2:
            return {f"{d}:{n}": {"error": str(exc)} for d, n, _ in listed}
    found: dict[str, dict[str, Any]] = {}
    for dist, items in by_dist.items():  # one distribution killed the sandbox's process: ask for each alone
        try:
            found.update(_catalogued(items))
        except PluginLoadError as exc:
            found.update({f"{d}:{n}": {"error": f"distribution {dist!r}: {exc}"} for d, n, _ in items})
    return found


def _catalogued(listed: list[list[str]]) -> dict[str, dict[str, Any]]:
    """The catalog of ``[distribution, name, value]`` entry points from one sandboxed process (``PluginLoadError``
    where that process fails or answers nonsense)."""
    answer = _ask({"task": "catalog", "entry_points": listed})
    try:
        return {f"{d}:{n}": _checked_entry(answer[f"{d}:{n}"]) for d, n, _ in listed}
    except (KeyError, TypeError, ValueError) as exc:
        from arena.plugins import PluginLoadError

        raise PluginLoadError(f"the attack sandbox's catalog of plugins is malformed ({clip_text(exc, 200)})") \
            from None


def _text(value: Any, limit: int = ERROR_CHARS) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{type(value).__name__} where text belongs")
    return clip_text(value, limit)


def _checked_entry(entry: Any) -> dict[str, Any]:
    """One entry point's answer, as the arena takes it from the sandbox (whose plugin code may have written it):
    the expected shape, texts printable and capped, names plain, capabilities known."""
    if not isinstance(entry, dict):
        raise TypeError("an entry that is no mapping")
    if entry.get("error") is not None:
        return {"error": _text(entry["error"])}
    kinds = [_text(k, 64) for k in entry["kinds"]]
    attacks = []
    for a in entry["attacks"] if "register_attacks" in kinds else []:
        name = a["name"]
        if type(name) is not str or printable(name) != name or not name or len(name) > MAX_NAME:
            raise ValueError(f"attack name {clip_text(name, MAX_NAME)!r}")
        game, version, entry_point = (_text(a[k], 200) for k in ("game", "version", "entry"))
        threat = sorted(_text(c, 64) for c in a["threat_model"])
        if not set(threat) <= CAPABILITIES:
            raise ValueError(f"capabilities {threat}")
        refused = None if a.get("refused") is None else _text(a["refused"])
        attacks.append({"name": name, "game": game, "version": version, "entry": entry_point,
                        "threat_model": threat, "refused": refused})
    registry_error = entry.get("registry_error")
    return {"kinds": kinds, "attacks": attacks,
            "registry_error": None if registry_error is None else _text(registry_error)}


def _checked_answer(answer: Any) -> dict[str, Any]:
    """One attack's validation, as the arena takes it: parameters as a mapping of at most ``PARAMS_BYTES`` of
    JSON, or errors with printable, capped locations and messages, or a refusal."""
    if not isinstance(answer, dict):
        raise TypeError("an answer that is no mapping")
    if isinstance(answer.get("params"), dict):
        if len(json.dumps(answer["params"])) > PARAMS_BYTES:
            return {"refused": f"its validated parameters take more than {PARAMS_BYTES} bytes"}
        return {"params": answer["params"]}
    if isinstance(answer.get("errors"), list):
        return {"errors": [{"loc": [p if isinstance(p, int) and not isinstance(p, bool) else _text(str(p), 100)
                                    for p in e["loc"]][:32],
                            "msg": _text(e["msg"], 500), "type": _text(e.get("type", ""), 100),
                            "input": e.get("input") if isinstance(e.get("input"), (bool, int, float)) else None}
                           for e in answer["errors"][:100]]}
    return {"refused": _text(answer.get("refused", "no answer"))}


def validate(attacks: list[tuple[str, str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """For each (name, entry, options) of a sandboxed attack: ``{"params": ...}`` (validated, JSON form), or
    ``{"errors": [...]}`` (pydantic's, each with ``loc``, ``msg``, ``type``, ``input``), or ``{"refused": why}``,
    all from one sandboxed process."""
    if not attacks:
        return []
    answer = _ask({"task": "validate", "attacks": [list(a) for a in attacks]})
    try:
        if not isinstance(answer, list) or len(answer) != len(attacks):
            raise ValueError("not one answer per attack")
        return [_checked_answer(a) for a in answer]
    except (KeyError, TypeError, ValueError) as exc:
        from arena.plugins import PluginLoadError

        raise PluginLoadError(f"the attack sandbox's validation of attack parameters is malformed "
                              f"({clip_text(exc, 200)})") from None
