"""The plugin manager: loads the ``arena`` entry-point group lazily, validates hooks, builds the registries."""

from __future__ import annotations

import functools
import importlib.metadata as md
import os
from dataclasses import dataclass
from typing import Any

import pluggy

from arena import hookspecs
from arena.catalog_slot import installed_catalog
from arena.contracts.attack import Attack
from arena.contracts.dataset import DatasetLoader
from arena.contracts.defense import Defense, honours_problem
from arena.contracts.game import Game
from arena.contracts.metric import Metric
from arena.contracts.model import Model
from arena.contracts.view import View, view_capabilities, view_items
from arena.registry import Registry, RegistryError

ENTRY_POINT_GROUP = "arena"
BUILTIN_DISTRIBUTION = "privacy-arena"
RESTRICT_ENV = "ARENA_LOAD_PLUGINS"


class PluginLoadError(Exception):
    """A plugin could not be loaded or declares a hook the arena does not know."""


@dataclass(frozen=True)
class PluginInfo:
    """One loaded plugin module and the distribution it comes from."""

    name: str
    module: str
    distribution: str
    version: str


@dataclass(frozen=True)
class Registries:
    """Every typed registry, filled from all loaded plugins."""

    games: Registry[type[Game]]
    datasets: Registry[type[DatasetLoader]]
    models: Registry[type[Model]]
    defenses: Registry[type[Defense]]
    attacks: Registry[type[Attack]]
    metrics: Registry[Metric]
    plugins: tuple[PluginInfo, ...]


def _allowed_distributions() -> set[str] | None:
    raw = os.environ.get(RESTRICT_ENV)
    if raw is None:
        return None
    return {part.strip().lower() for part in raw.split(",") if part.strip()}


def _entry_points() -> list[tuple[md.EntryPoint, str, str]]:
    """The allowed entry points of the ``arena`` group, each with its distribution's name and version, sorted by
    both names. Each distribution's metadata is parsed once (``EntryPoint.dist.name`` parses it on every access,
    which was most of what building the registries cost)."""
    allowed = _allowed_distributions()
    meta: dict[int, tuple[str, str]] = {}
    found = []
    for ep in md.entry_points(group=ENTRY_POINT_GROUP):
        if ep.dist is None:
            dist, version = "unknown", "unknown"
        else:
            if id(ep.dist) not in meta:
                parsed = ep.dist.metadata
                meta[id(ep.dist)] = (parsed["Name"], parsed["Version"])
            dist, version = meta[id(ep.dist)]
        if allowed is not None and dist.lower() != BUILTIN_DISTRIBUTION and dist.lower() not in allowed:
            continue
        found.append((ep, dist, version))
    return sorted(found, key=lambda f: (f[1] if f[0].dist else "", f[0].name))


def load_plugins() -> tuple[pluggy.PluginManager, tuple[PluginInfo, ...], dict[str, list[dict[str, Any]]]]:
    """Import every allowed entry point of the ``arena`` group and register it; unknown hooks are load errors.
    With a catalog installed (``arena.catalog_slot``), a third-party entry point that implements ``register_attacks``
    alone is not imported here: its attacks' declarations come back from the sandbox (third value, by plugin)."""
    pm = pluggy.PluginManager("arena")
    pm.add_hookspecs(hookspecs)
    infos = []
    eps = _entry_points()
    outside = [ep for ep, dist, _ in eps if (dist if ep.dist else "").lower() != BUILTIN_DISTRIBUTION]
    catalog = installed_catalog()
    seen = catalog(outside) if catalog is not None and outside else None
    sandboxed: dict[str, list[dict[str, Any]]] = {}
    for ep, dist, version in eps:
        plugin_name = f"{dist}:{ep.name}"
        found = (seen or {}).get(plugin_name)
        if found is not None and found.get("error"):
            raise PluginLoadError(found["error"])
        if found is not None and set(found["kinds"]) <= {"register_attacks"}:  # attack code: the sandbox's only
            if found.get("registry_error"):
                raise RegistryError(found["registry_error"])
            sandboxed[plugin_name] = found["attacks"]
            infos.append(PluginInfo(plugin_name, ep.value, dist, version))
            continue
        try:
            module = ep.load()
            pm.register(module, name=plugin_name)
        except pluggy.PluginValidationError as exc:
            raise PluginLoadError(f"plugin {plugin_name!r} ({ep.value}): {exc}") from exc
        except Exception as exc:  # report any import failure with the plugin's name
            raise PluginLoadError(f"plugin {plugin_name!r} ({ep.value}) failed to load: {exc!r}") from exc
        infos.append(PluginInfo(plugin_name, ep.value, dist, version))
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginLoadError(f"{exc} (no such hook in arena.hookspecs: check the spelling)") from exc
    return pm, tuple(infos), sandboxed


def sandboxed_attack(declared: dict[str, Any]) -> type[Attack]:
    """A stand-in for an attack class that only the sandbox imports, built from its declarations alone: ``name``,
    ``game``, ``threat_model``, ``version`` and where the class is (its ``__module__`` and ``__qualname__``, so
    the sandbox imports the real one); ``refused``: why its declarations cannot be planned (else None)."""
    module, _, qualname = declared["entry"].partition(":")
    return type(qualname.rpartition(".")[2] or "Attack", (Attack,), {
        "name": declared["name"], "game": declared["game"], "threat_model": frozenset(declared["threat_model"]),
        "version": declared["version"], "__module__": module, "__qualname__": qualname, "sandboxed": True,
        "refused": declared.get("refused"), "__doc__": "(imported only in the attack sandbox)"})


def is_sandboxed(cls: object) -> bool:
    """Whether ``cls`` is a stand-in (``sandboxed_attack``) for an attack that only the sandbox imports."""
    return isinstance(cls, type) and cls.__dict__.get("sandboxed") is True


def _fill(pm: pluggy.PluginManager, hook_name: str, registry: Registry, infos: dict[str, PluginInfo]) -> None:
    """Call one hook plugin by plugin so every registration is attributed to its plugin and distribution."""
    for impl in getattr(pm.hook, hook_name).get_hookimpls():
        info = infos[impl.plugin_name]

        def register(obj: object, _info: PluginInfo = info) -> None:
            registry.add(obj, plugin=_info.name, distribution=_info.distribution, version=_info.version)

        impl.function(register=register)


def _attack_problem(cls: type[Attack]) -> str | None:
    """An attack names the game it plays (checked against the registered games when a scenario is planned)."""
    game = getattr(cls, "game", None)
    if not isinstance(game, str) or not game:
        return 'does not name the game it plays: set its class attribute game (e.g. game = "membership")'
    return None


def _game_problem(cls: type[Game]) -> str | None:
    """A game's ``View`` is a ``View`` subclass whose declared items can be read."""
    if not (isinstance(cls.View, type) and issubclass(cls.View, View)):
        return f"declares View = {cls.View!r}, which is not a subclass of arena.View"
    try:
        view_items(cls.View)
    except TypeError as exc:
        return f"has a View whose items cannot be read: {exc}"
    declared, granted = cls.capabilities, view_capabilities(cls.View)
    if declared != granted:
        return (f"declares capabilities {sorted(declared)} but its View {cls.View.__name__} grants items by "
                f"{sorted(granted)}: drop capabilities (it is read from the View)")
    return None


def build_registries() -> Registries:
    """Load plugins and fill one registry per kind."""
    pm, infos, sandboxed = load_plugins()
    by_name = {i.name: i for i in infos}
    regs = Registries(
        games=Registry("game", Game, check=_game_problem),
        datasets=Registry("dataset", DatasetLoader),
        models=Registry("model", Model),
        defenses=Registry("defense", Defense, check=honours_problem),
        attacks=Registry("attack", Attack, check=_attack_problem),
        metrics=Registry("metric", Metric, instances=True),
        plugins=infos,
    )
    _fill(pm, "register_games", regs.games, by_name)
    for entry in regs.games:  # each game's own metrics, attributed to the plugin that registered the game
        for metric in entry.obj.metrics:
            regs.metrics.add(metric, plugin=entry.plugin, distribution=entry.distribution, version=entry.version)
    _fill(pm, "register_datasets", regs.datasets, by_name)
    _fill(pm, "register_models", regs.models, by_name)
    _fill(pm, "register_defenses", regs.defenses, by_name)
    _fill(pm, "register_attacks", regs.attacks, by_name)
    for plugin, declared in sandboxed.items():
        info = by_name[plugin]
        for attack in declared:
            regs.attacks.add(sandboxed_attack(attack), plugin=plugin, distribution=info.distribution,
                             version=info.version)
    _fill(pm, "register_metrics", regs.metrics, by_name)
    return regs


@functools.lru_cache(maxsize=1)
def registries() -> Registries:
    """The registries of this process, built on first use."""
    return build_registries()
