"""Bring your own training: a defense made from a user's plain-PyTorch function ``fit(model, X, y, seed) -> model``.

``arena.user_defense(fit, name=...)`` returns a ``Defense`` class. Register it from a plugin of your own, like any
defense (``register_defenses``); a scenario then names it (``defenses: [{name: my-fit}]``) and never a code path:
scenario files execute no code (no import paths, no YAML tags), so the function reaches the arena only through a
plugin the user installs, whose source is hashed into every key and row like any local plugin's.

The defense trains the target and every shadow model of every pool (``arena.train_pool``: LiRA's, RMIA's, ...)
through the loop engine (``arena.engine.loop.train_user``): one model at a time, each a fresh module of the
track's model holding the arena's seeded initialisation of that model, in train mode, on the track's device,
handed to ``fit`` with its training records ([n, *input_shape], labels [n]) and the arena's per-model train seed.
The optimiser, scheduler, augmentation and mixed precision are the function's own. Claim: none (not DP).
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from arena.contracts.defense import Defense, Fit, FitTask
from arena.engine.ensemble import init_state
from arena.engine.loop import train_user

USER_FIT_NOTE = ("engine: loop (plain PyTorch, one model at a time, train mode) ran the user's function {where} "
                 "for the target and every shadow model")
"""The row note of every matchup of a ``user_defense``."""


def load_fit(spec: str | Path) -> Callable[..., Any]:
    """The function ``name`` of the Python file in ``"path/to/train.py:name"`` (the file is imported as a module of
    its own, once). ``ValueError`` naming what is wrong."""
    path_text, sep, name = str(spec).rpartition(":")
    if not sep or not name.isidentifier() or not path_text.endswith(".py"):
        raise ValueError(f"{spec!r}: 'path/to/train.py:function' expected")
    path = Path(path_text).resolve()
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    module_name = f"arena_user_fit_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"
    module = sys.modules.get(module_name)
    if module is None:
        loader_spec = importlib.util.spec_from_file_location(module_name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise ValueError(f"{path}: not importable as Python source")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[module_name] = module
        try:
            loader_spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]
            raise
    fit = getattr(module, name, None)
    if not callable(fit):
        raise ValueError(f"{path}: defines no function {name!r}")
    return fit


def _source_digest(fit: Callable[..., Any]) -> str:
    """SHA-256 of the function's source (of its qualified name when the source cannot be read), 12 digits."""
    try:
        text = inspect.getsource(fit)
    except (OSError, TypeError):
        text = f"{getattr(fit, '__module__', '')}.{getattr(fit, '__qualname__', repr(fit))}"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _takes_recipe(fit: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fit).parameters
    except (TypeError, ValueError):
        return False
    return "recipe" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _instance(fit: Callable[..., Any] | str, name: str, version: str, honours: tuple[str, ...],
              params: Any) -> Defense:
    """A configuration of ``user_defense(fit, ...)``, rebuilt where it is unpickled."""
    cls = user_defense(fit, name=name, version=version, honours=honours)
    return cls(params)


_MADE: dict[tuple[Any, ...], type[Defense]] = {}


def user_defense(fit: Callable[..., Any] | str | Path, *, name: str, version: str = "1",
                 honours: Iterable[str] = ("epochs", "lr")) -> type[Defense]:
    """A defense class named ``name`` that trains every model with ``fit(model, X, y, seed) -> model`` (or the
    function of a script, ``"path/to/train.py:function"``), through the loop engine.

    ``fit`` gets a fresh ``torch.nn.Module`` of the track's model holding the arena's seeded initialisation, in
    train mode on the track's device; ``X`` [n, *input_shape] and ``y`` [n] (int64) its training records; ``seed``
    the arena's train seed of this model (an int: seed your own generators, data loaders and augmentation from
    it). It returns the trained module (or None: the module it was given, trained in place). A function that takes
    a ``recipe`` keyword also gets the track's training recipe (``arena.Recipe``: ``epochs``, ``lr``,
    ``batch_size``, ``momentum``, ...). ``honours``: the recipe fields your function follows (``RECIPE_FIELDS``;
    every track sets epochs and lr, so the default claims those two: a scenario that puts any other in effect is
    refused). ``fit`` is a module-level function (or a script's): the arena's workers find it by its module and
    name, as they find every plugin's code. ``version`` is yours; the function's source digest is appended
    (``1+fit.<sha>``), so an edited function is a new defense version and never reuses cached models."""
    honours = tuple(sorted(set(honours)))
    if isinstance(fit, (str, Path)):  # by its absolute path: a worker elsewhere finds the same file
        path_text, _, function_name = str(fit).rpartition(":")
        fit = f"{Path(path_text).resolve()}:{function_name}" if path_text.endswith(".py") else str(fit)
    key = (fit, name, version, honours)
    if key in _MADE:
        return _MADE[key]
    function = load_fit(fit) if isinstance(fit, str) else fit
    if not callable(function):
        raise TypeError(f"user_defense: fit must be a function or 'path/to/train.py:function', not {fit!r}")
    where = f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', '?')}"
    pass_recipe = _takes_recipe(function)

    def train(self: Defense, task: FitTask) -> Fit:
        state = init_state(task.arch, task.init_seeds, task.X.dtype, task.device)
        extra = {"recipe": task.recipe} if pass_recipe else {}
        return Fit(train_user(task.arch, task.X, task.y, state, task.train_seeds, function, **extra), None)

    def reduce(self: Defense) -> tuple[Any, ...]:  # the class is made at run time: pickled by how it was made
        return _instance, (*key[:3], key[3], self.params)

    cls = type(f"UserFit_{name.replace('-', '_')}", (Defense,), {
        "__reduce__": reduce,
        "name": name,
        "version": f"{version}+fit.{_source_digest(function)}",
        "honours": frozenset(honours),
        "row_note": USER_FIT_NOTE.format(where=where),
        "fit_function": staticmethod(function),
        "fit": train,
        "__module__": getattr(function, "__module__", __name__) or __name__,
        "__doc__": f"The user's training function {where}, run by the loop engine on every model. Claims nothing.",
    })
    _MADE[key] = cls
    return cls

