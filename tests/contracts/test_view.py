"""A view's items are declared once, by annotation, with the capability that grants them: the view keeps what the
attack's threat model grants, withholds the rest with an error naming the capability, and refuses (TypeError) a
game that builds it with an undeclared item or without a declared one."""

from __future__ import annotations

from typing import Annotated, ClassVar

import pytest

from arena import Game, Grant, MembershipGame, ReconstructionGame, ThreatModelError, View
from arena.contracts.view import view_capabilities, view_items


class Toy(View):
    X: list
    seed: int
    model: Annotated[str, Grant("query")]
    weights: Annotated[tuple, Grant("parameters")]
    bias: Annotated[tuple, Grant("parameters")]
    note: ClassVar[str] = "a class attribute, not an item"
    _private: int


ITEMS = {"X": [1, 2], "seed": 7, "model": "box", "weights": (1.0,), "bias": (0.0,)}


def test_declared_items_and_their_grants_are_read_from_the_annotations() -> None:
    assert view_items(Toy) == {"X": None, "seed": None, "model": "query", "weights": "parameters",
                               "bias": "parameters"}
    assert view_capabilities(Toy) == {"query", "parameters"}


def test_common_items_and_granted_ones_are_given_the_rest_withheld_naming_the_capability() -> None:
    view = Toy("spy", frozenset({"query"}), ITEMS)
    assert (view.X, view.seed, view.model) == ([1, 2], 7, "box")
    assert dir(view) == ["X", "model", "seed"]
    with pytest.raises(ThreatModelError, match=r"^attack 'spy' did not declare capability 'parameters', which "
                                               r"grants 'weights'$"):
        _ = view.weights
    with pytest.raises(ThreatModelError, match=r"^the view of attack 'spy' has no item 'labels'$"):
        _ = view.labels
    with pytest.raises(AttributeError, match="read-only"):
        view.X = []


def test_a_view_granted_every_capability_holds_every_item() -> None:
    view = Toy("all", frozenset({"query", "parameters"}), ITEMS)
    assert {name: getattr(view, name) for name in dir(view)} == ITEMS


def test_an_undeclared_or_a_missing_item_is_the_games_type_error() -> None:
    with pytest.raises(TypeError, match=r"^Toy declares X, seed, model, weights, bias; not declared: labels$"):
        Toy("spy", frozenset(), {**ITEMS, "labels": [0, 1]})
    with pytest.raises(TypeError, match=r"^Toy declares X, seed, model, weights, bias; missing bias, seed$"):
        Toy("spy", frozenset(), {k: v for k, v in ITEMS.items() if k not in ("seed", "bias")})


def test_a_subclass_inherits_its_bases_items() -> None:
    class More(Toy):
        population: Annotated[list, Grant("population")]

    assert list(view_items(More)) == [*view_items(Toy), "population"]
    view = More("spy", frozenset({"population"}), {**ITEMS, "population": [3]})
    assert view.population == [3]
    with pytest.raises(ThreatModelError, match="'query'"):
        _ = view.model


def test_an_item_with_two_grants_or_an_unresolvable_type_is_refused_naming_the_view() -> None:
    class Twice(View):
        model: Annotated[str, Grant("query"), Grant("labels")]

    with pytest.raises(TypeError, match=r"view .*Twice: item 'model' has 2 grants"):
        view_items(Twice)

    class Hidden(View):
        model: Annotated[NotImportedAtRuntime, Grant("query")]  # noqa: F821 - the point of the test

    with pytest.raises(TypeError, match=r"annotations of view .*Hidden cannot be evaluated .*NotImportedAtRuntime"):
        Hidden("spy", frozenset(), {"model": 1})


def test_a_games_capabilities_are_read_from_its_view() -> None:
    assert MembershipGame.capabilities == {"query", "labels", "parameters", "population", "training"}
    assert ReconstructionGame.capabilities == {"parameters", "fixed-set", "training", "prior"}
    assert Game.capabilities == frozenset()

    class Parity(Game):
        View = Toy

    assert Parity.capabilities == {"query", "parameters"}
