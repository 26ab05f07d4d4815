"""What registration checks of a plugin against its contract: every abstract method of its base class implemented,
every class attribute the base declares without a value set (``name``, an attack's ``game``, a game's ``Spec``),
its ``Params`` a pydantic model, and what each kind adds (a game's metrics and ``View``, a metric's fields).
Each check returns what is wrong, as the end of a sentence that names the plugin (``arena.registry``), or None."""

from __future__ import annotations

import inspect

from pydantic import BaseModel

from arena.contracts.game import Game
from arena.contracts.metric import Metric
from arena.contracts.model import Model, ModelParams
from arena.contracts.view import View, view_capabilities, view_items


def abstract_methods(cls: type, base: type) -> list[str]:
    """The abstract methods of ``base`` that ``cls`` leaves unimplemented, in the order ``base`` declares them."""
    left = set(getattr(cls, "__abstractmethods__", ()))
    return [name for name, value in vars(base).items() if getattr(value, "__isabstractmethod__", False)
            and name in left]


def required_attributes(base: type) -> list[str]:
    """The class attributes ``base`` declares (``ClassVar`` annotations) without giving them a value: a plugin of
    that kind sets each."""
    return [name for name, hint in vars(base).get("__annotations__", {}).items()
            if "ClassVar" in str(hint) and name not in vars(base)]


def _first_line(base: type, method: str) -> str:
    doc = inspect.getdoc(getattr(base, method)) or ""
    return doc.splitlines()[0].rstrip(".") if doc else ""


def contract_problem(cls: type, base: type, *, methods: bool = True) -> str | None:
    """What ``cls`` lacks of ``base``'s contract: an unset required class attribute, an unimplemented abstract
    method (unless ``methods`` is False: a class checked elsewhere, the attack sandbox's stand-in), a ``Params``
    that is not a pydantic model; None when nothing."""
    unset = [name for name in required_attributes(base) if not hasattr(cls, name)]
    if unset:
        return (f"does not set its class attribute{'s' if len(unset) > 1 else ''} {', '.join(unset)}, which every "
                f"arena.{base.__name__} declares")
    missing = abstract_methods(cls, base) if methods else []
    if missing:
        why = "; ".join(f"{m}: {line}" for m in missing if (line := _first_line(base, m)))
        return (f"does not implement {', '.join(missing)} (abstract in arena.{base.__name__}"
                + (f"; {why})" if why else ")"))
    if "Params" in vars(base).get("__annotations__", {}):
        params = getattr(cls, "Params", None)
        model = issubclass(base, Model)  # the message names the facade's class, not a module (``arena.ModelParams``)
        want, named = (ModelParams, f"arena.{ModelParams.__name__}") if model else (BaseModel, "a pydantic model")
        if not (isinstance(params, type) and issubclass(params, want)):
            return f"declares Params = {params!r}, which is not a subclass of {named} (its parameters' model)"
    return None


def game_problem(cls: type[Game]) -> str | None:
    """A game meets ``Game``'s contract (``release``, ``view`` and ``score``; ``name`` and ``Spec``), declares its
    metrics (at least one, its ``primary_metric``, where it names one, among them or, for a game that
    ``reports_metrics_of`` other games, among theirs, checked when its rows are written), and its ``View`` is a ``View``
    subclass whose declared items can be read."""
    problem = contract_problem(cls, Game)
    if problem is not None:
        return problem
    metrics = getattr(cls, "metrics", ())
    if not metrics:
        return "declares no metrics: set its class attribute metrics (arena.Metric declarations of its scores)"
    primary = getattr(cls, "primary_metric", None)
    if (primary is not None and primary not in {getattr(m, "name", None) for m in metrics}
            and not getattr(cls, "reports_metrics_of", ())):
        return f"declares primary_metric = {primary!r}, which is not one of its metrics"
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


def metric_problem(metric: Metric) -> str | None:
    """A metric names its game, says which direction is better (a bool) and describes itself, and its bounds are
    an ordered pair of numbers."""
    if not isinstance(metric.game, str) or not metric.game:
        return "does not name its game (Metric.game, a non-empty str)"
    if not isinstance(metric.higher_is_better, bool):
        return f"declares higher_is_better = {metric.higher_is_better!r}: True or False"
    if not isinstance(metric.description, str) or not metric.description.strip():
        return "has no description (Metric.description: what it measures, shown in the report)"
    b = metric.bounds
    if not (isinstance(b, tuple) and len(b) == 2 and all(isinstance(v, (int, float)) for v in b) and b[0] <= b[1]):
        return f"declares bounds = {metric.bounds!r}: a pair (low, high) with low <= high"
    return None
