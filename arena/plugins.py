"""The plugin manager: loads the ``arena`` entry-point group lazily, validates hooks, builds the registries."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata as md
import os
from dataclasses import dataclass
from typing import Any

import pluggy

from arena import hookspecs, trust
from arena.contracts.attack import Attack
from arena.contracts.checks import contract_problem, game_problem, metric_problem
from arena.contracts.dataset import DatasetLoader
from arena.contracts.defense import Defense, honours_problem
from arena.contracts.game import Game
from arena.contracts.metric import Metric
from arena.contracts.model import Model
from arena.registry import Registry, RegistryError
from arena.session import Catalog, Session, current

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
    distributions: tuple[DistributionInfo, ...] = ()
    """Every third-party distribution of the ``arena`` group and where its code runs (or why it does not)."""

    def broken(self) -> list[DistributionInfo]:
        """The third-party distributions that did not load (``broken`` or ``not loaded``)."""
        return [d for d in self.distributions if d.problem is not None]


def _allowed_distributions() -> set[str] | None:
    raw = os.environ.get(RESTRICT_ENV)
    if raw is None:
        return None
    return {part.strip().lower() for part in raw.split(",") if part.strip()}


@dataclass(frozen=True)
class DistributionInfo:
    """A third-party distribution with entry points in the ``arena`` group, and where its code runs: ``installed``
    (``arena environment`` or ``untrusted site``), ``zone`` (``arena process``: its modules are imported by the
    arena; ``attack sandbox``: only in sandboxed processes; ``broken`` or ``not loaded``: nowhere, ``problem``
    says why), ``trusted`` (by name: ``ARENA_TRUSTED``), ``startup`` (its ``.pth`` files)."""

    name: str
    version: str
    installed: str
    zone: str
    trusted: bool = False
    problem: str | None = None
    startup: tuple[str, ...] = ()
    provides: tuple[tuple[str, str], ...] = ()
    """(kind, name) of what a broken one declared before it failed (its attacks as the sandbox found them, what
    it registered): a scenario that names one is answered with its problem."""

    def describe(self) -> str:
        """One line: 'name version: zone (installed where; trusted by name)' or 'name version: broken: why'."""
        if self.problem is not None:
            return f"{self.name} {self.version}: {self.zone}: {self.problem}"
        notes = [f"installed in the {self.installed}"] + (["trusted by name"] if self.trusted else [])
        if self.startup and self.installed == trust.ENVIRONMENT and not self.trusted:
            notes.append(f"its start-up files {', '.join(self.startup)} run in every interpreter of the arena's "
                         "environment: install it with `arena plugins install` instead")
        return f"{self.name} {self.version}: {self.zone} ({'; '.join(notes)})"


BROKEN, NOT_LOADED = "broken", "not loaded"
_KINDS = {"register_games": "a game", "register_datasets": "a dataset", "register_models": "a model",
          "register_defenses": "a defense", "register_metrics": "a metric"}


def _entry_points() -> list[tuple[md.EntryPoint, str, str, str]]:
    """The allowed entry points of the ``arena`` group, each with its distribution's name and version and where
    it is installed (``arena.trust.ENVIRONMENT``, or ``UNTRUSTED_SITE``: read from its metadata only), sorted by
    both names. Each distribution's metadata is parsed once (``EntryPoint.dist.name`` parses it on every access,
    which was most of what building the registries cost). In a sandboxed process the untrusted site, where it was
    added, is on the import path: its distributions are found there as any other."""
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
        found.append((ep, dist, version, trust.ENVIRONMENT))
    if not trust.in_sandbox():
        here = {trust.normalize(d) for _, d, _, _ in found}
        for site_dist in trust.site_distributions():
            name, version = site_dist.metadata["Name"], site_dist.metadata["Version"]
            if trust.normalize(name) in here:  # the environment's copy is the one Python imports
                continue
            found += [(ep, name, version, trust.UNTRUSTED_SITE) for ep in site_dist.entry_points
                      if ep.group == ENTRY_POINT_GROUP]
    found = [f for f in found if allowed is None or f[1].lower() == BUILTIN_DISTRIBUTION or f[1].lower() in allowed]
    return sorted(found, key=lambda f: (f[1] if f[0].dist else "", f[0].name))


def _distribution(name: str, version: str, installed: str, eps: list[md.EntryPoint]) -> DistributionInfo:
    startup: tuple[str, ...] = ()
    dist = next((ep.dist for ep in eps if ep.dist is not None), None)
    if dist is not None:
        with contextlib.suppress(Exception):
            startup = tuple(trust.startup_files(dist))
    return DistributionInfo(name, version, installed, NOT_LOADED, trust.is_trusted(name), None, startup)


def _refusal(info: DistributionInfo, kinds: set[str]) -> str | None:
    """Why a distribution that implements the hooks ``kinds`` may not run where it is installed, or None."""
    others = sorted(_KINDS[k] for k in kinds if k in _KINDS)
    if info.installed == trust.UNTRUSTED_SITE and others:
        return (f"distribution {info.name!r} is installed in the untrusted site ({trust.untrusted_site()}) but "
                f"registers {', '.join(others)}, which runs in the arena's process; only attacks run from there: "
                "install it into the arena's environment and trust it by name")
    if "register_attacks" in kinds and others and not info.trusted:
        return (f"distribution {info.name!r} registers attacks together with {', '.join(others)}: its attack code "
                f"would run in the arena's process; trust it by name ({trust.TRUSTED_ENV}={info.name} or --trust "
                f"{info.name}) or ship its attacks in a distribution of their own")
    return None


def load_plugins(catalog: Catalog | None) -> tuple[pluggy.PluginManager, tuple[PluginInfo, ...],
                                                   dict[str, list[dict[str, Any]]], dict[str, DistributionInfo]]:
    """Import the allowed entry points of the ``arena`` group that may run here and register them; unknown hooks
    are load errors. The built-in distribution's failures raise; a third-party distribution whose import or
    registration fails is recorded as broken (fourth value: every third-party distribution, by name) and the
    others load. Which third-party entry points are imported here is decided by the attack sandbox's ``catalog``
    (the session's, ``arena.session``), which imports each of them in a sandboxed process first: one that
    implements ``register_attacks`` alone is never imported here (its attacks' declarations come back from the
    sandbox, the third value, by plugin), nor is a distribution of the untrusted site, nor one that registers
    attacks with any other kind unless it is trusted by name (``arena.trust``). Without a catalog, only
    distributions trusted by name are imported. In a sandboxed process, everything loads."""
    pm = pluggy.PluginManager("arena")
    pm.add_hookspecs(hookspecs)
    infos: list[PluginInfo] = []
    sandboxed: dict[str, list[dict[str, Any]]] = {}
    eps = _entry_points()
    outside: dict[str, list[tuple[md.EntryPoint, str, str]]] = {}
    for ep, dist, version, installed in eps:
        if dist.lower() == BUILTIN_DISTRIBUTION and ep.dist is not None:
            _register(pm, ep, f"{dist}:{ep.name}")
            infos.append(PluginInfo(f"{dist}:{ep.name}", ep.value, dist, version))
        else:
            outside.setdefault(dist, []).append((ep, version, installed))
    dists = {d: _distribution(d, found[0][1], found[0][2], [ep for ep, _, _ in found]) for d, found in outside.items()}
    everything = trust.in_sandbox()
    seen = None
    if catalog is not None and outside and not everything:
        seen = catalog([ep for found in outside.values() for ep, _, _ in found])
        everything = seen is None
    for dist, found in outside.items():
        info = dists[dist]
        plugins = {f"{dist}:{ep.name}": ep for ep, _, _ in found}
        if everything:
            answers: dict[str, Any] = dict.fromkeys(plugins)
        elif seen is None:  # no sandbox to ask: only what the user trusts by name is imported
            if not info.trusted or info.installed != trust.ENVIRONMENT:
                dists[dist] = dataclasses.replace(info, problem="not loaded in this process: its session has no "
                                                  "attack sandbox to look at it first (arena.session)")
                continue
            answers = dict.fromkeys(plugins)
        else:
            answers = {name: seen.get(name) or {"error": f"plugin {name!r}: no answer from the sandbox"}
                       for name in plugins}
        problem = next((a["error"] for a in answers.values() if a is not None and a.get("error")), None)
        problem = problem or next((a["registry_error"] for a in answers.values()
                                   if a is not None and a.get("registry_error")), None)
        kinds = {k for a in answers.values() if a is not None for k in a.get("kinds", ())}
        problem = problem or _refusal(info, kinds)
        attacks = [a for answer in answers.values() if answer is not None for a in answer.get("attacks", ())]
        if problem is None:
            zone, loaded = trust.ATTACK_SANDBOX, []
            try:
                for name, ep in plugins.items():
                    answer = answers[name]
                    if answer is not None and set(answer["kinds"]) <= {"register_attacks"}:
                        site = info.installed == trust.UNTRUSTED_SITE  # its process adds the untrusted site
                        sandboxed[name] = [{**a, "site": site} for a in answer["attacks"]]  # the sandbox's only
                    else:
                        _register(pm, ep, name)
                        loaded.append(name)
                        zone = trust.ARENA_PROCESS
            except PluginLoadError as exc:
                problem = str(exc)
                for name in loaded:
                    pm.unregister(name=name)
                for name in plugins:
                    sandboxed.pop(name, None)
        if problem is not None:
            dists[dist] = dataclasses.replace(info, zone=BROKEN, problem=problem,
                                              provides=tuple(("attack", str(a["name"])) for a in attacks))
            continue
        dists[dist] = dataclasses.replace(info, zone=zone)
        infos += [PluginInfo(name, ep.value, dist, info.version) for name, ep in plugins.items()]
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginLoadError(f"{exc} (no such hook in arena.hookspecs: check the spelling)") from exc
    return pm, tuple(infos), sandboxed, dists


def _register(pm: pluggy.PluginManager, ep: md.EntryPoint, plugin_name: str) -> None:
    """Import one entry point here and register it: ``PluginLoadError`` naming the plugin when it cannot be."""
    try:
        module = ep.load()
        pm.register(module, name=plugin_name)
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        with contextlib.suppress(Exception):
            pm.unregister(name=plugin_name)
        if "unknown hook" in str(exc):
            raise PluginLoadError(f"{exc} (no such hook in arena.hookspecs: check the spelling)") from exc
        raise PluginLoadError(f"plugin {plugin_name!r} ({ep.value}): {exc}") from exc
    except Exception as exc:  # report any import failure with the plugin's name
        raise PluginLoadError(f"plugin {plugin_name!r} ({ep.value}) failed to load: {exc!r}") from exc


def sandboxed_attack(declared: dict[str, Any]) -> type[Attack]:
    """A stand-in for an attack class that only the sandbox imports, built from its declarations alone: ``name``,
    ``game``, ``threat_model``, ``version`` and where the class is (its ``__module__`` and ``__qualname__``, so
    the sandbox imports the real one); ``refused``: why its declarations cannot be planned (else None)."""
    module, _, qualname = declared["entry"].partition(":")
    return type(qualname.rpartition(".")[2] or "Attack", (Attack,), {
        "name": declared["name"], "game": declared["game"], "threat_model": frozenset(declared["threat_model"]),
        "version": declared["version"], "__module__": module, "__qualname__": qualname, "sandboxed": True,
        "refused": declared.get("refused"), "__doc__": "(imported only in the attack sandbox)",
        "untrusted_site": declared.get("site") is True})


def is_sandboxed(cls: object) -> bool:
    """Whether ``cls`` is a stand-in (``sandboxed_attack``) for an attack that only the sandbox imports."""
    return isinstance(cls, type) and cls.__dict__.get("sandboxed") is True


class _Broken(Exception):  # noqa: N818 - internal: one third-party distribution failed while registering
    def __init__(self, distribution: str, message: str, names: list[tuple[str, str]]) -> None:
        super().__init__(message)
        self.distribution, self.names = distribution, names


def _add(registry: Registry, obj: object, info: PluginInfo, tried: list[tuple[str, str]]) -> None:
    """Register ``obj`` for ``info``'s plugin; a third-party distribution's failure is ``_Broken`` (with the names
    it registered so far, ``tried``), the arena's own raises."""
    name = obj.__dict__.get("name") if isinstance(obj, type) else getattr(obj, "name", None)
    if isinstance(name, str) and name:
        tried.append((registry.kind, name))
    try:
        registry.add(obj, plugin=info.name, distribution=info.distribution, version=info.version)
    except RegistryError as exc:
        if info.distribution.lower() != BUILTIN_DISTRIBUTION:
            raise _Broken(info.distribution, str(exc), tried) from None
        first = registry.entry(name) if isinstance(name, str) and name in registry else None
        if first is None or first.distribution.lower() == BUILTIN_DISTRIBUTION:
            raise
        raise _Broken(first.distribution, str(exc), [(registry.kind, str(name))]) from None  # it took a built-in's name


def _fill(pm: pluggy.PluginManager, hook_name: str, registry: Registry, infos: dict[str, PluginInfo],
          tried: dict[str, list[tuple[str, str]]]) -> None:
    """Call one hook plugin by plugin (the arena's own first) so every registration is attributed to its plugin
    and distribution; a third-party hook that raises breaks its distribution (``_Broken``)."""
    impls = getattr(pm.hook, hook_name).get_hookimpls()
    for impl in sorted(impls, key=lambda i: infos[i.plugin_name].distribution.lower() != BUILTIN_DISTRIBUTION):
        info = infos[impl.plugin_name]
        names = tried.setdefault(info.distribution, [])

        def register(obj: object, _info: PluginInfo = info, _names: list[tuple[str, str]] = names) -> None:
            _add(registry, obj, _info, _names)

        if info.distribution.lower() == BUILTIN_DISTRIBUTION:
            impl.function(register=register)
            continue
        try:
            impl.function(register=register)
        except _Broken:
            raise
        except Exception as exc:  # noqa: BLE001 - a third party's hook: its distribution is broken
            raise _Broken(info.distribution, f"plugin {info.name!r} failed in {hook_name}: {exc!r}", names) \
                from None


def _attack_problem(cls: type[Attack]) -> str | None:
    """An attack meets ``Attack``'s contract (``name``, ``game``, ``run``; the attack sandbox's stand-in has its
    class's ``run`` checked in the sandbox) and names the game it plays with a non-empty str (checked against the
    registered games when a scenario is planned)."""
    game = getattr(cls, "game", None)
    if not isinstance(game, str) or not game:
        return 'does not name the game it plays: set its class attribute game (e.g. game = "membership")'
    return contract_problem(cls, Attack, methods=not is_sandboxed(cls))


def _defense_problem(cls: type[Defense]) -> str | None:
    return contract_problem(cls, Defense) or honours_problem(cls)


def build_registries(session: Session | None = None) -> Registries:
    """Load plugins (third-party ones as the attack sandbox's catalog of ``session`` decides, by default the
    process's session; ``load_plugins``) and fill one registry per kind, anew. A third-party distribution whose
    registration fails is set aside as broken (its problem kept in ``distributions``, its names answered with it)
    and the registries are filled again without it."""
    pm, infos, sandboxed, dists = load_plugins((current() if session is None else session).catalog)
    while True:
        tried: dict[str, list[tuple[str, str]]] = {}
        try:
            return _filled(pm, infos, sandboxed, dists, tried)
        except _Broken as exc:
            for p in [p for p in infos if p.distribution == exc.distribution]:
                if pm.get_plugin(p.name) is not None:
                    pm.unregister(name=p.name)
                sandboxed.pop(p.name, None)
            infos = tuple(p for p in infos if p.distribution != exc.distribution)
            dists[exc.distribution] = dataclasses.replace(
                dists[exc.distribution], zone=BROKEN, problem=str(exc),
                provides=tuple(dict.fromkeys([*dists[exc.distribution].provides, *exc.names])))


def _filled(pm: pluggy.PluginManager, infos: tuple[PluginInfo, ...], sandboxed: dict[str, list[dict[str, Any]]],
            dists: dict[str, DistributionInfo], tried: dict[str, list[tuple[str, str]]]) -> Registries:
    by_name = {i.name: i for i in infos}
    regs = Registries(
        games=Registry("game", Game, check=game_problem),
        datasets=Registry("dataset", DatasetLoader, check=lambda cls: contract_problem(cls, DatasetLoader)),
        models=Registry("model", Model, check=lambda cls: contract_problem(cls, Model)),
        defenses=Registry("defense", Defense, check=_defense_problem),
        attacks=Registry("attack", Attack, check=_attack_problem),
        metrics=Registry("metric", Metric, instances=True, check=metric_problem),
        plugins=infos,
        distributions=tuple(dists[d] for d in sorted(dists, key=str.lower)),
    )
    _fill(pm, "register_games", regs.games, by_name, tried)
    for entry in regs.games:  # each game's own metrics, attributed to the plugin that registered the game
        for metric in entry.obj.metrics:
            _add(regs.metrics, metric, by_name[entry.plugin], tried.setdefault(entry.distribution, []))
    _fill(pm, "register_datasets", regs.datasets, by_name, tried)
    _fill(pm, "register_models", regs.models, by_name, tried)
    _fill(pm, "register_defenses", regs.defenses, by_name, tried)
    _fill(pm, "register_attacks", regs.attacks, by_name, tried)
    for plugin, declared in sandboxed.items():
        info = by_name[plugin]
        for attack in declared:
            _add(regs.attacks, sandboxed_attack(attack), info, tried.setdefault(info.distribution, []))
    _fill(pm, "register_metrics", regs.metrics, by_name, tried)
    broken = [d for d in regs.distributions if d.zone in (BROKEN, NOT_LOADED)]
    if broken:
        note = "; ".join(f"{d.name} {d.version} ({d.zone})" for d in broken)
        for registry in (regs.games, regs.datasets, regs.models, regs.defenses, regs.attacks, regs.metrics):
            registry.note = f"third-party distributions not loaded, which may provide it: {note} (see `arena plugins`)"
        for d in broken:
            for kind, name in d.provides:
                registries: dict[str, Registry[Any]] = {
                    "game": regs.games, "dataset": regs.datasets, "model": regs.models, "defense": regs.defenses,
                    "attack": regs.attacks, "metric": regs.metrics}
                holder = registries.get(kind)
                if holder is not None and name not in holder:
                    holder.withhold(name, f"its distribution {d.name} {d.version} is {d.zone}: {d.problem}")
    return regs


def registries(session: Session | None = None) -> Registries:
    """The registries of ``session`` (default: the process's, ``arena.session.current()``), built on first use
    with its sandbox catalog."""
    session = current() if session is None else session
    if session.registries is None:
        session.registries = build_registries(session)
    return session.registries


def forget_registries() -> None:
    """Build the process session's registries again on next use (the names trusted changed; a forked process)."""
    current().forget()
