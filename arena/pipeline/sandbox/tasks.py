"""The sandboxed side of ``arena.pipeline.sandbox.catalog``: in a process set up as an attack's (its own user,
limits, no secret), third-party entry points imported and listed, attacks' parameters validated; every answer is
JSON data, sent back as a wire message (``arena.pipeline.sandbox.child``)."""

from __future__ import annotations

import importlib.metadata as md
import json
from collections.abc import Callable
from typing import Any


def _plain(value: Any) -> Any:
    """``value`` as JSON data (a string where it is not)."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return repr(value)


def _declared(cls: Any) -> dict[str, Any]:
    from arena.pipeline.sandbox.static import static_attack

    try:
        ref = static_attack(cls)
        return {"name": ref.name, "game": ref.game, "threat_model": sorted(ref.threat_model),
                "version": ref.version, "entry": ref.entry, "refused": None}
    except TypeError as exc:  # planned as refused: the plan names the attribute
        name, game = getattr(cls, "name", None), getattr(cls, "game", None)
        return {"name": name if isinstance(name, str) and name else f"{cls.__module__}.{cls.__qualname__}",
                "game": game if isinstance(game, str) and game else "(refused)", "threat_model": [], "version": "1",
                "entry": f"{cls.__module__}:{cls.__qualname__}", "refused": str(exc)}


def _listed(dist: str, name: str, value: str) -> dict[str, Any]:
    """One entry point imported and its hooks called (as ``arena.plugins`` would), with what they register."""
    import pluggy

    from arena import hookspecs
    from arena.contracts.attack import Attack
    from arena.plugins import _attack_problem
    from arena.registry import Registry, RegistryError

    plugin = f"{dist}:{name}"
    pm = pluggy.PluginManager("arena")
    pm.add_hookspecs(hookspecs)
    try:
        pm.register(md.EntryPoint(name=name, value=value, group="arena").load(), name=plugin)
    except pluggy.PluginValidationError as exc:
        return {"error": f"plugin {plugin!r} ({value}): {exc}"}
    except Exception as exc:  # noqa: BLE001 - any import failure, named as the arena names it
        return {"error": f"plugin {plugin!r} ({value}) failed to load: {exc!r}"}
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        return {"error": f"{exc} (no such hook in arena.hookspecs: check the spelling)"}
    kinds = sorted(h.name for h in pm.get_hookcallers(pm.get_plugin(plugin)) or [])
    if "register_attacks" not in kinds:
        return {"kinds": kinds, "attacks": []}
    registry: Registry = Registry("attack", Attack, check=_attack_problem)
    attacks: list[dict[str, Any]] = []

    def register(obj: object) -> None:
        registry.add(obj, plugin=plugin, distribution=dist, version="")  # its checks, as in the arena
        attacks.append(_declared(obj))

    try:
        for impl in pm.hook.register_attacks.get_hookimpls():
            impl.function(register=register)
    except RegistryError as exc:
        return {"kinds": kinds, "attacks": [], "registry_error": str(exc)}
    except Exception as exc:  # noqa: BLE001
        return {"error": f"plugin {plugin!r} ({value}) failed to register its attacks: {exc!r}"}
    return {"kinds": kinds, "attacks": attacks}


def _validated(name: str, entry: str, options: Any, attack_class: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    from pydantic import ValidationError

    cls = attack_class({"name": name, "entry": entry})
    if cls is None:
        return {"refused": f"attack {name!r} could not be imported in the sandbox ({entry})"}
    try:
        params = cls.Params.model_validate(options)
    except ValidationError as exc:
        return {"errors": [{"loc": [p if isinstance(p, (int, str)) else str(p) for p in e["loc"]],
                            "msg": str(e["msg"]), "type": str(e["type"]), "input": _plain(e.get("input"))}
                           for e in exc.errors()]}
    return {"params": _plain(params.model_dump(mode="json"))}


def answer(task: dict[str, Any], attack_class: Callable[[dict[str, Any]], Any]) -> Any:
    """In the sandboxed process: the answer to a ``catalog`` or ``validate`` task, as JSON data (``attack_class``:
    how the attack's process imports an attack's class)."""
    if task["task"] == "catalog":
        return {f"{dist}:{name}": _listed(dist, name, value) for dist, name, value in task["entry_points"]}
    out = []
    for name, entry, options in task["attacks"]:
        try:
            out.append(_validated(name, entry, options, attack_class))
        except Exception as exc:  # noqa: BLE001 - a validator that raises anything else: that attack's problem
            out.append({"refused": f"its parameters could not be validated: {type(exc).__name__}: {exc}"})
    return out
