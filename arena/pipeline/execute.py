"""Playing one matchup: rebuild its plugins from plain data, train or fetch the release, play the game, make a row.

The same functions run in-process (``--serial``) and inside Ray workers, so both give identical rows.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import platform
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from arena._version import __version__
from arena.engine.architecture import GROUP_NORM_NOTE, engine_note
from arena.engine.augment import Augment
from arena.engine.recipe import Recipe
from arena.engine.seeds import RESAMPLES, challenger_seed, resample_seed
from arena.pipeline import sandbox
from arena.pipeline.plan import Matchup, architecture, load_dataset
from arena.pipeline.procedure import TrainingProcedure
from arena.pipeline.row import SCHEMA_VERSION
from arena.pipeline.store import RunStore
from arena.plugins import Registries, registries
from arena.session import Session


def recipe(training: dict[str, Any]) -> Recipe:
    """The engine's recipe from a defense configuration's effective ``training`` section (JSON form)."""
    aug = training.get("augment") or {}
    return Recipe(epochs=training["epochs"], lr=training["lr"], momentum=training["momentum"],
                  batch_size=training["batch_size"], augment=Augment(aug.get("crop", 0), aug.get("flip", False)),
                  ema=training.get("ema", 0.0))


def _regs(regs: Registries | None) -> Registries:
    """``regs``, or the process session's registries when a caller passes none."""
    return registries() if regs is None else regs


def procedure_for(matchup: Matchup, store: RunStore, regs: Registries | None = None) -> TrainingProcedure:
    """The defense configuration of ``matchup`` bound to its track, caching into the run directory; its plugins
    from ``regs`` (default: the process session's registries)."""
    regs = _regs(regs)
    dataset = load_dataset(matchup.track.dataset, regs)
    cls = regs.defenses.get(matchup.defense.name)
    defense = cls(cls.Params.model_validate(matchup.defense.params))
    return TrainingProcedure(
        defense,
        architecture(matchup.track, dataset, per_example=cls.per_example_gradients, regs=regs),
        recipe(matchup.defense.training),
        solver=matchup.defense.training["solver"],
        device=matchup.track.device,
        cache=store.cache,
        chunk=matchup.track.pool_chunk,
        code={k: p.identity() for k, p in matchup.provenance().items() if k in ("model", "defense")},
    )


def model_notes(procedure: TrainingProcedure) -> list[str]:
    """What the arena changed in the track's model for this defense (BatchNorm → GroupNorm), and which engine
    trains it when that is not the default batched one (``engine_note``: the loop engine and why, and for a defense
    that clips per-example gradients how Opacus runs its DP-SGD; a defense's own ``row_note``, e.g. a user's
    function on the loop engine, in its place), as row notes."""
    note = engine_note(procedure.arch, dp=bool(getattr(getattr(procedure, "defense", None), "per_example_gradients",
                                                       False)))
    own = getattr(getattr(procedure, "defense", None), "row_note", None)
    if isinstance(own, str) and own:  # the defense's own engine (a user's function on the loop engine)
        note = own
    return ([GROUP_NORM_NOTE] if procedure.arch.group_norm else []) + ([note] if note else [])


def _plugin_version(entry: Any, name: str, version: str) -> str:
    """'distribution version / name vversion': which code a row's plugin came from (a matchup planned without
    provenance)."""
    return f"{entry.distribution} {entry.version} / {name} v{version}"


def plugin_versions(matchup: Matchup, regs: Registries | None = None) -> dict[str, str]:
    """Which code each plugin of the matchup came from (game, dataset, model, defense, attack):
    'distribution version / name vversion', and for a plugin installed locally or in editable mode its source
    hash as ``<kind>.source`` (``arena.pipeline.provenance``)."""
    regs = _regs(regs)
    known = {k: v for kind, p in matchup.provenance().items() for k, v in p.versions(kind).items()}
    fallback: dict[str, tuple[Any, str, str]] = {"game": (regs.games, matchup.track.game.name, matchup.game_version),
                "defense": (regs.defenses, matchup.defense.name, matchup.defense.version),
                "attack": (regs.attacks, matchup.attack.name, matchup.attack.version)}
    for kind, (registry, name, version) in fallback.items():
        if kind not in known:
            known[kind] = _plugin_version(registry.entry(name), name, version)
    return known


def base_row(matchup: Matchup, session: Session | None = None) -> dict[str, Any]:
    """The columns of a result row (``arena.pipeline.row.ResultRow``) that the matchup determines: its identity, the
    versions of the code that plays it, and how to read its game's metrics (``metric_info``, the game's primary
    and ranking metric), so that no plugin is needed to read the row. The plugins are ``session``'s (default: the
    process's)."""
    game = matchup.track.game.name
    regs = registries(session)
    return {
        "schema": SCHEMA_VERSION,
        "key": matchup.key,
        "release_key": matchup.release_key,
        "scenario": matchup.scenario,
        "track": matchup.track.name,
        "game": game,
        "defense": matchup.defense.name,
        "defense_label": matchup.defense.label,
        "defense_params": {**matchup.defense.params, "training": matchup.defense.training},
        "epsilon": matchup.defense.epsilon,
        "delta": matchup.defense.delta,
        "attack": matchup.attack.name,
        "attack_label": matchup.attack.label,
        "attack_params": matchup.attack.params,
        "threat_model": planned_threat_model(matchup, regs),
        "seed": matchup.seed,
        "definition": matchup.definition,
        "versions": {
            "arena": __version__,
            "torch": torch.__version__,
            "python": platform.python_version(),
            **plugin_versions(matchup, regs),
        },
        **game_columns(game, matchup.track.game, regs),
    }


def planned_threat_model(matchup: Matchup, regs: Registries | None = None) -> list[str]:
    """The capabilities the matchup's attack is played with, sorted: the plan's static reading of its class (for
    a matchup planned without one, read now; none when the class declares no plain one)."""
    if matchup.attack.threat_model is not None:
        return sorted(matchup.attack.threat_model)
    try:
        return sorted(sandbox.static_attack(_regs(regs).attacks.get(matchup.attack.name)).threat_model)
    except (TypeError, KeyError):
        return []


def _finite(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def metric_info(game: str, regs: Registries | None = None) -> dict[str, dict[str, Any]]:
    """Each registered metric of ``game``: its direction and range (None for an infinite end), and for a proportion
    the metric counting its trials, written into every row so that a leaderboard of the run never needs the
    plugins to know how to read its numbers. A game's metrics include those of the games it
    ``reports_metrics_of``. The plugins are ``regs``' (default: the process session's registries)."""
    regs = _regs(regs)
    games = {game, *getattr(regs.games.get(game), "reports_metrics_of", ())}
    return {
        e.name: {"higher_is_better": bool(e.obj.higher_is_better),
                 "bounds": [_finite(e.obj.bounds[0]), _finite(e.obj.bounds[1])],
                 **({"trials": e.obj.trials} if getattr(e.obj, "trials", None) else {})}
        for e in regs.metrics
        if e.obj.game in games
    }


def game_columns(game: str, spec: Any = None, regs: Registries | None = None) -> dict[str, Any]:
    """How to read the rows of the registered ``game``: ``metric_info``, its ``primary_metric``, its default
    ``rank_metric`` for the track's ``spec`` (its primary one unless it declares another) and ``game_parts`` (its
    parts the results read)."""
    regs = _regs(regs)
    cls = regs.games.get(game)
    primary = getattr(cls, "primary_metric", None)
    folder = getattr(cls, "template_dir", None)
    ranked = cls.rank_metric_of(spec) if spec is not None and hasattr(cls, "rank_metric_of") else getattr(
        cls, "rank_metric", None)
    return {"metric_info": metric_info(game, regs), "primary_metric": primary,
            "rank_metric": ranked or primary,
            "game_parts": {**{part: getattr(cls, part, None) for part in GAME_PARTS},
                           "template_dir": None if folder is None else str(folder)}}


GAME_PARTS = ("audit_rule", "audit_view", "report_view", "resample")
"""The ``"module:function"`` parts of a game that the results read (``Game``'s class attributes)."""


def game_for(matchup: Matchup, dataset: Any, store: RunStore, regs: Registries | None = None) -> Any:
    """The registered game of the matchup's track, set up on ``dataset`` with the challenger's seed: the run's
    secret keyed by the matchup's scenario seed (the row keeps the scenario seed; nothing an attack sees reveals
    the secret)."""
    seed = challenger_seed(store.secret(), matchup.seed)
    return _regs(regs).games.get(matchup.track.game.name)(matchup.track.game, dataset, seed)


def train_release(matchup: Matchup, run_dir: str, threads: int = 1,
                  session: Session | None = None) -> dict[str, Any]:
    """Train (or find in the cache) the released model shared by every attack on this defense and seed, on
    ``threads`` torch threads (the CPUs its task holds), with ``session``'s plugins (default: the process's)."""
    torch.set_num_threads(threads)
    start = time.perf_counter()
    store = RunStore(run_dir)
    regs = registries(session)
    procedure = procedure_for(matchup, store, regs)
    game = game_for(matchup, load_dataset(matchup.track.dataset, regs), store, regs)
    release = game.release(procedure)
    return {"utility": release.utility, "trained": procedure.stats.trained, "seconds": time.perf_counter() - start}


CLAIM_TOLERANCE = 1e-9
"""Relative slack when comparing a claimed ε with its target (accountants search σ numerically)."""


def claim_problem(claim: Any, target: float | None) -> str | None:
    """Why a release's claim breaks its configuration's target ε, or None: a configuration labelled ε = 1 must not
    release a model claiming ε = 1000 (it would pass the audit against its own weaker claim)."""
    if target is None:
        return None
    if claim is None:
        return f"the defense is configured for ε = {target:g} but its release claims nothing"
    if not claim.epsilon <= target * (1 + CLAIM_TOLERANCE):
        return f"the release claims ε = {claim.epsilon:g}, above its configuration's target ε = {target:g}"
    return None


def bootstrap_draws(game_cls: type, outcome: Any, key: str) -> dict[str, np.ndarray]:
    """The game's bootstrap draws of the matchup's metrics from its arrays (``Game.resample``, ``RESAMPLES`` draws
    seeded by the key), drawn once when it is scored and saved beside its row for the leaderboard to read."""
    module, _, name = (getattr(game_cls, "resample", None) or "").partition(":")
    draws = getattr(importlib.import_module(module), name)(
        outcome.arrays, list(outcome.metrics), resamples=RESAMPLES, seed=resample_seed(key)) if name else None
    return dict(draws or {})


def play_matchup(matchup: Matchup, run_dir: str, threads: int = 1,
                 session: Session | None = None) -> dict[str, Any]:
    """Play one matchup and return its result row, on ``threads`` torch threads (the CPUs its task holds); a
    plugin's exception fails this matchup only. The plugins are ``session``'s (default: the process's), passed
    down to every step here; the attack itself is built in its sandboxed process, from that process's own
    session (no attack code runs in this one)."""
    torch.set_num_threads(threads)
    start = time.perf_counter()
    row = base_row(matchup, session)
    row.update(status="ok", utility=None, metrics={}, operating_points={}, notes=[], claim=None, error=None,
               traceback=None)
    store = None
    try:
        store = RunStore(run_dir)
        regs = registries(session)
        game_cls = regs.games.get(matchup.track.game.name)
        attack = sandbox.attack_ref(regs.attacks.get(matchup.attack.name), matchup.attack.params,
                                    threat_model=matchup.attack.threat_model)  # the plan's, read statically
        # built, validated and asked skip_reason in its own process: no attack code runs in this one
        with sandbox.AttackProcess(attack, track=matchup.track, guesses=sandbox.guess_types(game_cls)) as process:
            reason = process.skip_reason()
            if reason is not None:
                row.update(status="skipped", error=reason)
            else:
                procedure = procedure_for(matchup, store, regs)
                dataset = load_dataset(matchup.track.dataset, regs)
                game = game_for(matchup, dataset, store, regs)
                release = game.release(procedure)
                row.update(utility=None if release.utility is None else float(release.utility),
                           claim=release.claim.as_dict() if release.claim else None)
                broken = claim_problem(release.claim, matchup.defense.epsilon)
                if broken is not None:
                    row.update(status="failed", error=f"claim: {broken}")
                else:
                    run = _group_runner(process, attack, matchup, game_cls)
                    outcome = game.play(attack, release, procedure, run=run)
                    row.update(metrics=outcome.metrics, operating_points=dict(outcome.operating_points),
                               notes=[*model_notes(procedure), *outcome.notes])
                    if outcome.arrays:
                        store.save_arrays(matchup.key, {k: torch.from_numpy(np.ascontiguousarray(v))
                                                        for k, v in outcome.arrays.items()})
                        store.save_draws(matchup.key, bootstrap_draws(game_cls, outcome, matchup.key))
                    game.save_artifacts(outcome, store.artifact_dir(matchup.key))
    except sandbox.AttackFailed as exc:  # the attack's own process raised, exited, died or was refused
        row.update(status="failed", error=str(exc), traceback=exc.child_traceback)
        _keep_full_text(store, matchup.key, exc.full_text)
    except sandbox.ServerDied:
        raise  # the arena's fault, not the attack's: played again, as after a worker's death
    except Exception as exc:  # noqa: BLE001 - isolation: any plugin failure fails this matchup only
        text, trace = f"{type(exc).__name__}: {exc}", traceback.format_exc()
        row.update(status="failed", error=sandbox.clip_text(text, sandbox.ERROR_CHARS),
                   traceback=sandbox.clip_text(trace, sandbox.TRACEBACK_CHARS, tail=True))
        if len(text) > sandbox.ERROR_CHARS or len(trace) > sandbox.TRACEBACK_CHARS:
            _keep_full_text(store, matchup.key, sandbox.clip_text(f"{text}\n\n{trace}", sandbox.ARTIFACT_CHARS))
    row["seconds"] = round(time.perf_counter() - start, 4)
    return row


def _group_runner(first: sandbox.AttackProcess, attack: sandbox.AttackRef, matchup: Matchup,
                  game_cls: type) -> Callable[[list[Any]], list[Any]]:
    """``run(views) -> guesses`` for ``Game.play``: the first group of views in ``first`` (the matchup's attack
    process, already asked ``skip_reason``), every later group in a fresh process of the same attack, each started
    only after the previous one has ended (and its files were removed), so that groups share nothing."""
    state = {"groups": 0}
    guesses_of = sandbox.guess_types(game_cls)

    def run(views: list[Any]) -> list[Any]:
        state["groups"] += 1
        if state["groups"] == 1:
            return [first.run(v) for v in views]
        first.close()
        with sandbox.AttackProcess(attack, track=matchup.track, guesses=guesses_of) as process:
            return [process.run(v) for v in views]

    return run


def _keep_full_text(store: RunStore | None, key: str, text: str | None) -> None:
    """A failure's text longer than its row keeps, beside the matchup's artifacts (``error.txt``, capped)."""
    if store is None or not text:
        return
    with contextlib.suppress(OSError):
        directory = store.artifact_dir(key)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "error.txt").write_text(text, encoding="utf-8")
