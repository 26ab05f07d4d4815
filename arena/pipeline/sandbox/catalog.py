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
field. ``arena.pipeline.sandbox.tasks`` is the sandboxed side of both.
"""

from __future__ import annotations

import importlib.metadata as md
from typing import Any

from arena.pipeline.sandbox.static import AttackRef

TASK_SECONDS = 300.0
"""How long a sandboxed catalog or validation may take (importing plugins: torch, their dependencies)."""
_TASK_REF = AttackRef(name="plugin sandbox", game="", threat_model=frozenset(), version="", entry=":")


def _ask(task: dict[str, Any]) -> Any:
    from arena.pipeline.sandbox.parent import AttackFailed, AttackProcess

    try:
        with AttackProcess(_TASK_REF, task=task, guesses=(), timeout=TASK_SECONDS) as process:
            return process.answer()
    except AttackFailed as exc:
        raise RuntimeError(f"the attack sandbox could not {task['task']} third-party plugins: {exc}") from None


def catalog(entry_points: list[md.EntryPoint]) -> dict[str, dict[str, Any]] | None:
    """What each third-party entry point registers, by ``distribution:name`` (``arena.plugins.Catalog``), found in
    a sandboxed process; None in an attack's own process (which imports its plugins itself)."""
    from arena.pipeline.sandbox.child import in_attack_process

    if in_attack_process():
        return None
    listed = [[ep.dist.name if ep.dist else "unknown", ep.name, ep.value] for ep in entry_points]
    answer = _ask({"task": "catalog", "entry_points": listed})
    if not isinstance(answer, dict):
        raise RuntimeError("the attack sandbox's catalog of plugins is malformed")
    return answer


def validate(attacks: list[tuple[str, str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """For each (name, entry, options) of a sandboxed attack: ``{"params": ...}`` (validated, JSON form), or
    ``{"errors": [...]}`` (pydantic's, each with ``loc``, ``msg``, ``type``, ``input``), or ``{"refused": why}``,
    all from one sandboxed process."""
    if not attacks:
        return []
    answer = _ask({"task": "validate", "attacks": [list(a) for a in attacks]})
    if not isinstance(answer, list) or len(answer) != len(attacks) or not all(isinstance(a, dict) for a in answer):
        raise RuntimeError("the attack sandbox's validation of attack parameters is malformed")
    return answer
