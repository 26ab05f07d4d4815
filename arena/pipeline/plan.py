"""Validation and planning: scenario files → checked tracks → matchups, each keyed by what determines it.

All problems of all files are collected before any work starts; nothing is written anywhere here.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ValidationError

from arena.contracts.dataset import Dataset, DatasetLoader, available_memory
from arena.contracts.defense import Defense
from arena.contracts.game import Game
from arena.contracts.spec import GameSpec, PluginRef, Scenario, Track, TrainingOverride, TrainingSpec
from arena.engine.architecture import Architecture, batched_problem, for_per_example_clipping, group_norm_problem
from arena.pipeline.honours import unhonoured, unmet
from arena.pipeline.labels import Labelled, assign, flatten
from arena.pipeline.limits import too_many
from arena.pipeline.modelsize import TRAINING_MEMORY_FACTOR, TooLarge, model_bytes
from arena.pipeline.provenance import Provenance, SourceError, provenance, track_provenance
from arena.pipeline.sandbox.catalog import validate as validate_attacks
from arena.pipeline.sandbox.static import static_attack
from arena.pipeline.scenario import ScenarioError, error_problems, parse_scenario, pydantic_problems
from arena.pipeline.store import content_key
from arena.plugins import Registries, is_sandboxed, registries
from arena.registry import UnknownNameError
from arena.session import Session


@dataclass(frozen=True)
class DefenseConfig:
    """One expanded defense configuration of a track (e.g. dpsgd at one ε), with the recipe it trains by."""

    name: str
    params: dict[str, Any]
    version: str
    epsilon: float | None
    delta: float | None
    label: str
    training: dict[str, Any]
    """The track's training recipe with this entry's ``training`` override applied (JSON form)."""
    code: Provenance | None = None
    """The defense plugin's provenance (``arena.pipeline.provenance``): part of the key."""


@dataclass(frozen=True)
class AttackConfig:
    name: str
    params: dict[str, Any]
    version: str
    label: str
    threat_model: frozenset[str] | None = None
    """The capabilities its class declares, read statically (``arena.pipeline.sandbox.static``): what its view
    grants and its rows record (None: read from the class when it is played)."""
    code: Provenance | None = None
    """The attack plugin's provenance (``arena.pipeline.provenance``): part of the key."""


@dataclass(frozen=True)
class Matchup:
    """(track, defense configuration, attack, seed): the unit of scheduling, caching, resuming and reporting."""

    scenario: str
    track: Track
    defense: DefenseConfig
    attack: AttackConfig
    seed: int
    data_fingerprint: str
    game_version: str
    """The version of the registered game the track plays (``Game.version``)."""
    code: dict[str, Provenance] = field(default_factory=dict, hash=False)
    """The provenance of the track's ``game``, ``dataset`` and ``model`` plugins (``arena.pipeline.provenance``)."""

    def provenance(self) -> dict[str, Provenance]:
        """Every plugin that shapes the matchup, by kind: game, dataset, model, defense, attack."""
        return {**self.code, **({"defense": self.defense.code} if self.defense.code else {}),
                **({"attack": self.attack.code} if self.attack.code else {})}

    def track_identity(self) -> dict[str, Any]:
        """The parts of the track that determine a release (not the lists of other defenses and attacks): its
        dataset, model, recipe, device and engine (unless ``auto``: keys from before the field stay), and the game
        played: its spec (with its name) and its version; the code of its game, dataset and model plugins (name,
        version, distribution and, installed locally, source)."""
        return {
            **self.track.model_dump(mode="json", include={"name", "dataset", "model", "training", "game", "device"}),
            **({"engine": self.track.engine} if self.track.engine != "auto" else {}),
            "game_version": self.game_version,
            "data": self.data_fingerprint,
            **({"code": {k: p.identity() for k, p in sorted(self.code.items())}} if self.code else {}),
        }

    def defense_identity(self) -> dict[str, Any]:
        """The defense configuration as keyed: name, parameters, version, its effective recipe and its code."""
        code = {"code": self.defense.code.identity()} if self.defense.code else {}
        return {"name": self.defense.name, "params": self.defense.params, "version": self.defense.version,
                "training": self.defense.training, **code}

    def attack_identity(self) -> dict[str, Any]:
        """The attack configuration as keyed: name, parameters, version and its code."""
        code = {"code": self.attack.code.identity()} if self.attack.code else {}
        return {"name": self.attack.name, "params": self.attack.params, "version": self.attack.version, **code}

    @property
    def release_key(self) -> str:
        return content_key({"track": self.track_identity(), "defense": self.defense_identity(), "seed": self.seed})

    @property
    def key(self) -> str:
        return content_key({"release": self.release_key, "attack": self.attack_identity()})

    @property
    def definition(self) -> dict[str, str]:
        """Hashes of the matchup's definition apart from its seed (and the run's secret): ``track``
        (``track_identity``), ``defense`` and ``attack``. Rows of any runs that share all three are seeds of one
        matchup definition, which ``arena.results.merge`` pools; a track name with two ``track`` hashes is two
        tracks."""
        return {"track": content_key(self.track_identity()), "defense": content_key(self.defense_identity()),
                "attack": content_key(self.attack_identity())}


@dataclass(frozen=True)
class Plan:
    """Every matchup of the scenarios given, in a stable order, plus the scenarios themselves."""

    scenarios: tuple[tuple[Path, Scenario], ...]
    matchups: tuple[Matchup, ...]


@functools.lru_cache(maxsize=16)
def _load_dataset_cached(loader: type[DatasetLoader], params_json: str) -> Dataset:
    """Keyed by the loader class itself, not its name: two sessions whose registries hold different loaders under
    one name never share a dataset."""
    return loader().load(loader.Params.model_validate(json.loads(params_json)))


def load_dataset(ref: PluginRef, regs: Registries | None = None) -> Dataset:
    """The dataset a track names, by the loader ``regs`` (default: the process session's registries) holds under
    its name (cached per process and loader)."""
    loader = (registries() if regs is None else regs).datasets.get(ref.name)
    params = loader.Params.model_validate(ref.options)
    return _load_dataset_cached(loader, params.model_dump_json())


def architecture(track: Track, dataset: Dataset, per_example: bool = False,
                 regs: Registries | None = None) -> Architecture:
    """The track's model plugin (from ``regs``, default the process session's registries) bound to the dataset's
    shape (BatchNorm → GroupNorm for ``per_example`` clipping)."""
    cls = (registries() if regs is None else regs).models.get(track.model.name)
    arch = Architecture(cls(cls.Params.model_validate(track.model.options)), dataset.shape, dataset.n_classes,
                        engine=track.engine)
    return for_per_example_clipping(arch) if per_example else arch


def _models_at_once(track: Track, regs: Registries) -> tuple[int, str]:
    """How many copies of the model one training call holds at least, and why: ``pool_chunk`` when an attack of
    the track is granted ``training`` (it trains shadow pools, ``pool_chunk`` models per call), else one."""
    for ref in track.attacks:
        try:
            threat_model = static_attack(regs.attacks.get(ref.name)).threat_model
        except (UnknownNameError, TypeError):
            continue
        if "training" in threat_model:
            return track.pool_chunk, f" x {track.pool_chunk} models at once (pool_chunk: attack {ref.name!r} " \
                                     "trains shadow models)"
    return 1, ""


def _check_model(
    source: str, where: str, track: Track, dataset: Dataset | None, regs: Registries, problems: list[str]
) -> Architecture | None:
    """The track's architecture when its model is known, valid, fits in memory to train and builds for the
    dataset; else problems. Its size is counted before anything that size is allocated."""
    cls = _lookup(source, f"{where}.model", track.model.name, regs.models, problems)
    if cls is None or _plugin_params(source, f"{where}.model", track.model, cls, problems) is None or dataset is None:
        return None
    cannot = (f"{source}: {where}.model: model {track.model.name!r} cannot be built for dataset {dataset.name!r} "
              f"(records of shape {dataset.shape}, {dataset.n_classes} classes)")
    have = available_memory()
    copies, why = _models_at_once(track, regs)
    try:
        arch = architecture(track, dataset, regs=regs)
        size = model_bytes(arch, have // (TRAINING_MEMORY_FACTOR * copies))
    except TooLarge as exc:
        size = exc.args[0]
    except Exception as exc:  # noqa: BLE001 - a plugin's build failure is a problem with this track's model
        problems.append(f"{cannot}: {exc}")
        return None
    need = size * TRAINING_MEMORY_FACTOR * copies
    if need > have:
        problems.append(f"{source}: {where}.model: model {track.model.name!r} takes {size / 2**30:.3g} GiB for "
                        f"dataset {dataset.name!r}; training it needs at least {size / 2**30:.3g} GiB x "
                        f"{TRAINING_MEMORY_FACTOR} (gradients, optimiser state, per-example work){why} = "
                        f"{need / 2**30:.3g} GiB, more than the {have / 2**30:.3g} GiB of memory available")
        return None
    try:
        arch.template()
    except Exception as exc:  # noqa: BLE001
        problems.append(f"{cannot}: {exc}")
        return None
    return arch


def _training(
    source: str, prefix: str, base: TrainingSpec, ref: PluginRef, problems: list[str]
) -> tuple[dict[str, Any], TrainingSpec | None]:
    """Split a defense entry's ``training`` override from its plugin parameters; return (parameters, recipe)."""
    options = ref.options
    override = options.pop("training", None)
    if override is None:
        return options, base
    try:
        return options, TrainingOverride.model_validate(override).apply(base)
    except ValidationError as exc:
        problems.extend(pydantic_problems(source, f"{prefix}.training", exc))
        return options, None


def _plugin_params(
    source: str, prefix: str, ref: PluginRef, cls: type[Any], problems: list[str], options: dict[str, Any] | None = None
) -> BaseModel | None:
    try:
        return cls.Params.model_validate(ref.options if options is None else options)
    except ValidationError as exc:
        problems.extend(pydantic_problems(source, prefix, exc))
        return None


def _lookup(source: str, prefix: str, name: str, registry, problems: list[str]):  # noqa: ANN001, ANN202
    try:
        return registry.get(name)
    except UnknownNameError as exc:
        problems.append(f"{source}: {prefix}.name: {exc}")
        return None


def _game_spec(source: str, prefix: str, track: Track, game: type[Game], problems: list[str]) -> GameSpec | None:
    """The track's ``game:`` validated by the registered game's ``Spec`` (errors at ``tracks[i].game.<field>``)."""
    if isinstance(track.game, game.Spec):
        return track.game
    try:
        return game.Spec.model_validate({"name": track.game.name, **track.game.options})
    except ValidationError as exc:
        problems.extend(pydantic_problems(source, prefix, exc))
        return None


def _sandbox_key(name: str, options: dict[str, Any]) -> str:
    return json.dumps([name, options], sort_keys=True, default=repr)


def sandboxed_params(parsed: list[tuple[Path, Scenario]], regs: Registries) -> dict[str, dict[str, Any]]:
    """The parameters of every attack of the scenarios that only the sandbox imports, validated there, all in one
    sandboxed process (``arena.pipeline.sandbox.catalog.validate``): by ``_sandbox_key``, its answer."""
    asked: dict[str, tuple[str, str, dict[str, Any]]] = {}
    for _, scenario in parsed:
        for track in scenario.tracks:
            for ref in track.attacks:
                cls = regs.attacks.get(ref.name) if ref.name in regs.attacks else None
                if cls is not None and is_sandboxed(cls) and not cls.__dict__.get("refused"):
                    asked[_sandbox_key(ref.name, ref.options)] = (ref.name, static_attack(cls).entry, ref.options)
    return dict(zip(asked, validate_attacks(list(asked.values())), strict=True))


def _sandbox_checked(source: str, prefix: str, ref: PluginRef, cls: type[Any], answers: dict[str, dict[str, Any]],
                     problems: list[str]) -> dict[str, Any] | None:
    """A sandboxed attack's parameters as the sandbox validated them (JSON form), else its problems."""
    if cls.__dict__.get("refused"):
        problems.append(f"{source}: {prefix}.name: attack {ref.name!r}: {cls.__dict__['refused']}")
        return None
    answer = answers.get(_sandbox_key(ref.name, ref.options), {})
    if isinstance(answer.get("params"), dict):
        return answer["params"]
    if isinstance(answer.get("errors"), list):
        problems.extend(error_problems(source, prefix, answer["errors"]))
    else:
        problems.append(f"{source}: {prefix}.name: attack {ref.name!r}: {answer.get('refused', 'not validated')}")
    return None


def _check_track(
    source: str, where: str, track: Track, regs: Registries, problems: list[str], local: bool = True,
    sandboxed: dict[str, dict[str, Any]] | None = None,
) -> tuple[Track, Dataset | None, list[DefenseConfig], list[AttackConfig]]:
    """Check one track; append problems; return what the plan needs when it is sound: the track with its game's
    spec validated, its dataset, its defense and attack configurations."""
    dataset = None
    loader = _lookup(source, f"{where}.dataset", track.dataset.name, regs.datasets, problems)
    if loader is not None and _plugin_params(source, f"{where}.dataset", track.dataset, loader, problems):
        try:
            dataset = load_dataset(track.dataset, regs)
        except (ValueError, OSError) as exc:
            problems.append(f"{source}: {where}.dataset.{_field_of(exc)}")
    game = _lookup(source, f"{where}.game", track.game.name, regs.games, problems)
    spec = _game_spec(source, f"{where}.game", track, game, problems) if game is not None else None
    if spec is None:
        game = None
    else:
        track = track.model_copy(update={"game": spec})
        if dataset is not None:
            for field, msg in game.problems(spec, dataset):
                problems.append(f"{source}: {where}.game{('.' + field) if field else ''}: {msg}")
    if local and track.device == "cuda" and not torch.cuda.is_available():
        problems.append(f"{source}: {where}.device: 'cuda' requested but torch.cuda.is_available() is False")
    arch = _check_model(source, where, track, dataset, regs, problems)
    if arch is not None and (why := batched_problem(arch)):
        problems.append(f"{source}: {where}.engine: 'batched' refused: {why}; use engine 'auto' or 'loop'")
    if arch is not None and track.training.solver == "newton" and (arch.dense is None or arch.dense.hidden):
        problems.append(f"{source}: {where}.training.solver: 'newton' applies to logistic regression only")
    elif arch is not None and track.training.solver == "newton" and not arch.l2 > 0:
        problems.append(f"{source}: {where}.training.solver: 'newton' needs model.l2 > 0: without a penalty the "
                        "optimum may not exist (separable data) and the Newton system is singular (constant "
                        "features); use solver 'auto' or 'gradient', or set model.l2")

    defenses: list[DefenseConfig] = []
    named: list[Labelled] = []
    for j, ref in enumerate(track.defenses):
        prefix = f"{where}.defenses[{j}]"
        cls = _lookup(source, prefix, ref.name, regs.defenses, problems)
        options, training = _training(source, prefix, track.training, ref, problems)
        params = _plugin_params(source, prefix, ref, cls, problems, options) if cls else None
        if params is None or training is None:
            continue
        if cls.per_example_gradients and arch is not None and (why := group_norm_problem(arch)):
            problems.append(f"{source}: {where}.model: model {track.model.name!r}: {why}, so defense {cls.name!r} "
                            f"({prefix}) cannot clip per-example gradients; use a GroupNorm model (e.g. norm: group)")
        problems.extend(unhonoured(source, where, j, cls, ref, training, arch.l2 if arch is not None else 0.0))
        problems.extend(unmet(source, where, j, cls, training, arch.l2 if arch is not None else 0.0))
        try:
            code = provenance(regs.defenses.entry(cls.name))
        except SourceError as exc:
            problems.append(f"{source}: {prefix}.name: defense {cls.name!r}: {exc}")
            continue
        recipe = training.model_dump(mode="json")
        for config in cls.expand(params):
            defense: Defense = cls(config)
            if game is not None:
                for field_name, msg in defense.validate_for(game.train_size(track.game)):
                    problems.append(f"{source}: {prefix}.{field_name}: {msg}")
                if dataset is not None and arch is not None:  # e.g. a model trained elsewhere, for this track?
                    for field_name, msg in game.defense_problems(track.game, dataset, arch, defense):
                        problems.append(f"{source}: {prefix}{('.' + field_name) if field_name else ''}: {msg}")
            eps, dumped = defense.target_epsilon(), config.model_dump(mode="json")
            defenses.append(DefenseConfig(cls.name, dumped, cls.version, eps, defense.target_delta(), "", recipe,
                                          code))
            named.append(Labelled(cls.name, flatten({**dumped, "training": recipe}), eps, j, ref.label))
    defenses = assign(source, f"{where}.defenses", "defense", defenses, named, problems)

    attacks: list[AttackConfig] = []
    named = []
    for j, ref in enumerate(track.attacks):
        prefix = f"{where}.attacks[{j}]"
        cls = _lookup(source, prefix, ref.name, regs.attacks, problems)
        try:  # its declarations read statically: none of its code runs for them
            info = static_attack(cls) if cls else None
            if info is not None and info.name != ref.name:
                raise TypeError(f"it is registered as {ref.name!r} but its class declares name = {info.name!r}")
        except TypeError as exc:
            problems.append(f"{source}: {prefix}.name: attack {ref.name!r}: {exc}")
            continue
        if info is not None and is_sandboxed(cls):  # its Params ran in the sandbox (``sandboxed_params``)
            dumped = _sandbox_checked(source, prefix, ref, cls, sandboxed or {}, problems)
        else:
            params = _plugin_params(source, prefix, ref, cls, problems) if cls else None
            dumped = None if params is None else params.model_dump(mode="json")
        if dumped is None or info is None:
            continue
        if info.game not in regs.games:
            problems.append(f"{source}: {prefix}.name: attack {info.name!r} declares game = {info.game!r}: "
                            f"{UnknownNameError('game', info.game, regs.games.names())}")
        elif info.game != track.game.name:
            problems.append(f"{source}: {prefix}.name: attack {info.name!r} plays the {info.game!r} game, "
                            f"but this track plays {track.game.name!r}")
        elif game is not None and not info.threat_model <= game.capabilities:
            missing = ", ".join(sorted(info.threat_model - game.capabilities))
            problems.append(f"{source}: {prefix}.name: attack {info.name!r} needs {missing}, "
                            f"which the {game.name!r} game does not grant")
        try:
            code = provenance(regs.attacks.entry(info.name), module=info.entry.partition(":")[0],
                              version=info.version)
        except SourceError as exc:
            problems.append(f"{source}: {prefix}.name: attack {info.name!r}: {exc}")
            continue
        attacks.append(AttackConfig(info.name, dumped, info.version, "", info.threat_model, code))
        named.append(Labelled(info.name, flatten(dumped), None, j, ref.label))
    attacks = assign(source, f"{where}.attacks", "attack", attacks, named, problems)
    return track, dataset, defenses, attacks


def _field_of(exc: Exception) -> str:
    """Loader errors start with the field they concern ('path: ...'); default to the dataset's name."""
    text = str(exc)
    return text if ":" in text.split(" ")[0] else f"name: {text}"


def plan(paths: list[Path], local: bool = True, session: Session | None = None) -> Plan:
    """Validate every file completely, then expand into matchups; raise ``ScenarioError`` with all problems.

    ``local``: the matchups run on this machine, so a ``cuda`` track needs a GPU here (on a cluster the
    workers check instead). ``session``: whose plugins the scenarios name (default: the process's); its
    registries are passed down to every check, none reads the process's."""
    regs = registries(session)
    problems: list[str] = []
    parsed: list[tuple[Path, Scenario]] = []
    for path in paths:
        try:
            parsed.append((path, parse_scenario(path)))
        except ScenarioError as exc:
            problems.extend(exc.problems)
    names = [s.name for _, s in parsed]
    for path, scenario in parsed:
        if names.count(scenario.name) > 1:
            problems.append(f"{path}: name: scenario name {scenario.name!r} is used by more than one file")
    sandboxed = sandboxed_params(parsed, regs)  # no attack plugin's code runs here
    matchups: list[Matchup] = []
    for path, scenario in parsed:
        for i, track in enumerate(scenario.tracks):
            track, dataset, defenses, attacks = _check_track(str(path), f"tracks[{i}]", track, regs, problems, local,
                                                             sandboxed)
            if dataset is None:
                continue
            fingerprint = dataset.fingerprint()
            game_version = str(regs.games.get(track.game.name).version) if track.game.name in regs.games else ""
            try:
                code = track_provenance(track, regs)
            except SourceError as exc:
                problems.append(f"{path}: tracks[{i}]: {exc}")
                continue
            if cap := too_many(str(path), i, len(matchups), defenses, attacks, scenario.seeds):
                problems.append(cap)
                continue
            for defense in defenses:
                for attack in attacks:
                    for seed in scenario.seeds:
                        matchups.append(Matchup(scenario.name, track, defense, attack, seed, fingerprint,
                                                game_version, code))
    if problems:
        raise ScenarioError(problems)
    return Plan(tuple(parsed), tuple(matchups))
