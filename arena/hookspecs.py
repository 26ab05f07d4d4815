"""Hook specifications: the only way plugins hand games, models, defenses, attacks, datasets and metrics to the arena.

Every hook receives a ``register`` callback and returns nothing, so a plugin never
touches global state. Hooks are grouped by the lifecycle stage that calls them; all of
them run once, when the plugin manager builds the registries (``arena.plugins.registries``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("arena")
hookimpl = pluggy.HookimplMarker("arena")

Register = Callable[[Any], None]


@hookspec
def register_games(register: Register) -> None:
    """Register games (the challenger's protocols that scenario files name under ``game: {name: ...}``).

    ``register(game_cls)`` takes a subclass of ``arena.Game`` declaring ``name``, ``capabilities``, a pydantic
    ``Spec`` (subclassing ``arena.GameSpec``; it validates the rest of the scenario's ``game:`` entry), a ``View``
    subclass naming what an attack sees, its ``metrics``, and the methods ``train_size``, ``release``,
    ``view(attack, release, procedure)`` and ``score(attack, guess)``; optionally ``audit``, ``audit_section``
    and ``report_section``. The built-in ``membership`` and ``reconstruction`` games are registered this way.

    Example::

        @hookimpl
        def register_games(register):
            register(MyGame)
    """


@hookspec
def register_datasets(register: Register) -> None:
    """Register dataset loaders.

    ``register(loader)`` takes an instance of ``arena.contracts.dataset.DatasetLoader`` whose ``name``
    is what scenario files write under ``dataset: {name: ...}``.

    Example::

        @hookimpl
        def register_datasets(register):
            register(MyCsvLoader())
    """


@hookspec
def register_models(register: Register) -> None:
    """Register models (architectures that scenario files name under ``model: {name: ...}``).

    ``register(model_cls)`` takes a subclass of ``arena.Model``: a pydantic ``Params`` class (subclassing
    ``arena.ModelParams``) and ``build(input_shape, n_classes)`` returning a fresh ``torch.nn.Module`` that maps
    [batch, *input_shape] to logits [batch, n_classes]. The engine trains K seeded copies at once.

    Example::

        @hookimpl
        def register_models(register):
            register(MyResNet)
    """


@hookspec
def register_defenses(register: Register) -> None:
    """Register defenses (training procedures that produce a ``Release``).

    ``register(defense_cls)`` takes a subclass of ``arena.contracts.defense.Defense``.

    Example::

        @hookimpl
        def register_defenses(register):
            register(MyDefense)
    """


@hookspec
def register_attacks(register: Register) -> None:
    """Register attacks (turn a game's ``View`` into a guess).

    ``register(attack_cls)`` takes a subclass of ``arena.contracts.attack.Attack``.

    Example::

        @hookimpl
        def register_attacks(register):
            register(MyAttack)
    """


@hookspec
def register_metrics(register: Register) -> None:
    """Register extra metric declarations shown on the leaderboard.

    ``register(metric)`` takes an ``arena.contracts.metric.Metric`` (name, game, whether higher is better).

    Example::

        @hookimpl
        def register_metrics(register):
            register(Metric("my-score", game="membership", higher_is_better=True, description="..."))
    """
