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

    ``register(game_cls)`` takes a subclass of ``arena.Game`` declaring ``name``, a pydantic ``Spec``
    (subclassing ``arena.GameSpec``; it validates the rest of the scenario's ``game:`` entry), a ``View``
    subclass declaring what an attack sees (each item once, by annotation; ``Annotated[T, Grant("query")]`` for
    an item a capability grants), its ``metrics``, and the methods ``train_size``, ``release``,
    ``view(attack, release, procedure)`` and ``score(attack, guess)``; optionally ``audit_rule``, ``audit_view``
    and ``report_view``, each a ``"module:function"`` string. The built-in ``membership``, ``reconstruction`` and
    ``audit`` games are registered this way. Registering anything but a ``Game`` subclass is a ``RegistryError``.

    Example::

        @hookimpl
        def register_games(register):
            register(MyGame)
    """


@hookspec
def register_datasets(register: Register) -> None:
    """Register dataset loaders.

    ``register(loader_cls)`` takes a subclass of ``arena.DatasetLoader`` whose ``name`` is what scenario files
    write under ``dataset: {name: ...}``; its pydantic ``Params`` validates the entry's other keys, and
    ``load(params)`` returns an ``arena.Dataset``. The arena instantiates the class without arguments. Registering
    an instance (``register(MyCsvLoader())``) is a ``RegistryError``: register the class, as for every kind.

    Example::

        @hookimpl
        def register_datasets(register):
            register(MyCsvLoader)
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

    ``register(defense_cls)`` takes a subclass of ``arena.Defense``: its pydantic ``Params`` and
    ``fit(task) -> arena.Fit`` (the K trained models and their privacy ``Claim``, or None).

    Example::

        @hookimpl
        def register_defenses(register):
            register(MyDefense)
    """


@hookspec
def register_attacks(register: Register) -> None:
    """Register attacks (turn a game's ``View`` into a guess).

    ``register(attack_cls)`` takes a subclass of ``arena.Attack`` declaring ``name``, ``game`` (the name of the
    registered game it plays: required, a scenario that pits it in another game or names an unregistered one is
    invalid), its ``threat_model`` (capabilities), its pydantic ``Params`` and ``run(view) -> guess``.

    Example::

        @hookimpl
        def register_attacks(register):
            register(MyAttack)
    """


@hookspec
def register_metrics(register: Register) -> None:
    """Register extra metric declarations shown on the leaderboard.

    ``register(metric)`` takes an ``arena.Metric`` declaration (name, game, whether higher is better): a metric
    is data, not a plugin class, so this hook alone takes instances.

    Example::

        @hookimpl
        def register_metrics(register):
            register(Metric("my-score", game="membership", higher_is_better=True, description="..."))
    """
