"""Registration checks every plugin against its kind's contract: abstract methods, required class attributes,
``Params``, a metric's fields; each refusal names the plugin, the kind, the name and the missing item."""

from __future__ import annotations

import math

import pytest
from pydantic import BaseModel

from arena import Attack, DatasetLoader, Defense, Game, GameSpec, Metric, Model, ModelParams, View
from arena.contracts.checks import abstract_methods, contract_problem, metric_problem, required_attributes
from arena.plugins import _attack_problem, _defense_problem
from arena.registry import Registry, RegistryError


def _add(registry: Registry, obj: object) -> None:
    registry.add(obj, plugin="dist:mod", distribution="dist", version="1")


def test_each_kind_declares_what_a_plugin_must_give() -> None:
    assert abstract_methods(Attack, Attack) == ["run"]
    assert abstract_methods(Defense, Defense) == ["fit"]
    assert abstract_methods(Model, Model) == ["build"]
    assert abstract_methods(DatasetLoader, DatasetLoader) == ["load"]
    assert abstract_methods(Game, Game) == ["release", "view", "score"]
    assert required_attributes(Attack) == ["name", "game"]
    assert required_attributes(Game) == ["name", "Spec"]
    assert required_attributes(Defense) == required_attributes(Model) == required_attributes(DatasetLoader) == ["name"]


@pytest.mark.parametrize(("base", "kind", "method"), [
    (Defense, "defense", "fit"), (Model, "model", "build"), (DatasetLoader, "dataset", "load")])
def test_a_plugin_without_its_abstract_method_is_refused_naming_it(base: type, kind: str, method: str) -> None:
    cls = type("Half", (base,), {"name": "half"})
    registry = Registry(kind, base, check=_defense_problem if base is Defense else
                        (lambda c, b=base: contract_problem(c, b)))
    first_line = (getattr(base, method).__doc__ or "").splitlines()[0].rstrip(".")
    with pytest.raises(RegistryError) as caught:
        _add(registry, cls)
    assert str(caught.value) == (f"plugin 'dist:mod' registered {kind} 'half', which does not implement {method} "
                                 f"(abstract in arena.{base.__name__}; {method}: {first_line})")
    done = type("Whole", (cls,), {method: lambda self, *a: None})
    _add(registry, done)
    assert registry.get("half") is done


def test_a_missing_required_attribute_is_named() -> None:
    class NoGame(Attack):
        name = "no-game"

        def run(self, view: object) -> None:
            return None

    class NoSpec(Game):
        name = "no-spec"
        View = View

        def release(self, procedure: object) -> None: ...
        def view(self, attack: object, release: object, procedure: object) -> None: ...
        def score(self, attack: object, guess: object) -> None: ...

    with pytest.raises(RegistryError, match=r"'no-game', which does not name the game it plays: set its class "):
        _add(Registry("attack", Attack, check=_attack_problem), NoGame)
    assert contract_problem(NoSpec, Game) == ("does not set its class attribute Spec, which every arena.Game "
                                              "declares")
    NoSpec.Spec = GameSpec
    assert contract_problem(NoSpec, Game) is None


def test_params_must_be_a_pydantic_model_of_the_right_base() -> None:
    class Plain(BaseModel):
        width: int = 1

    def build(self: object, input_shape: tuple[int, ...], n_classes: int) -> None:
        return None

    wrong = type("Wrong", (Model,), {"name": "wrong", "Params": Plain, "build": build})
    assert contract_problem(wrong, Model) == (
        f"declares Params = {Plain!r}, which is not a subclass of arena.ModelParams (its parameters' model)")
    right = type("Right", (Model,), {"name": "right", "Params": type("P", (ModelParams,), {}), "build": build})
    assert contract_problem(right, Model) is None
    dataset = type("D", (DatasetLoader,), {"name": "d", "Params": dict, "load": lambda self, p: None})
    assert "which is not a subclass of a pydantic model" in str(contract_problem(dataset, DatasetLoader))


def test_the_sandbox_stand_in_is_checked_without_its_run() -> None:
    from arena.plugins import sandboxed_attack

    stand_in = sandboxed_attack({"entry": "somewhere:Coin", "name": "coin", "game": "membership",
                                 "threat_model": ["query"], "version": "1"})
    assert abstract_methods(stand_in, Attack) == ["run"]  # its class, with run, lives in the sandbox
    assert _attack_problem(stand_in) is None


@pytest.mark.parametrize(("metric", "problem"), [
    (Metric("m", "", True, "a score"), "does not name its game"),
    (Metric("m", "g", 1, "a score"), "declares higher_is_better = 1: True or False"),  # type: ignore[arg-type]
    (Metric("m", "g", True, "  "), "has no description"),
    (Metric("m", "g", True, "a score", bounds=(1.0, 0.0)), "declares bounds = (1.0, 0.0): a pair"),
    (Metric("m", "g", True, "a score", bounds=(0.0,)), "declares bounds = (0.0,): a pair"),  # type: ignore[arg-type]
])
def test_a_metric_declaration_is_checked(metric: Metric, problem: str) -> None:
    assert str(metric_problem(metric)).startswith(problem)
    with pytest.raises(RegistryError, match=r"^plugin 'dist:mod' registered metric 'm', which "):
        _add(Registry("metric", Metric, instances=True, check=metric_problem), metric)


def test_a_sound_metric_passes() -> None:
    assert metric_problem(Metric("m", "g", False, "a score", bounds=(0.0, math.inf))) is None
