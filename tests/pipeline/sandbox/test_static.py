"""arena.pipeline.sandbox.static: what the arena reads of an attack class runs none of its code and must be plain."""

from __future__ import annotations

import abc
import re

import pytest

from arena.contracts.attack import Attack
from arena.pipeline.sandbox import AttackRef, attack_ref, static_attack

CALLS: list[str] = []


class Plain(Attack):
    name = "plain"
    game = "membership"
    threat_model = frozenset({"query", "population"})
    version = "3"


class Inherits(Attack):
    name = "inherits"
    game = "membership"


class _Descriptor:
    def __get__(self, obj, owner):
        CALLS.append("descriptor")
        return "sneaky"


class Descriptor(Attack):
    name = _Descriptor()
    game = "membership"


class _Meta(abc.ABCMeta):  # a metaclass of an arena.Attack derives from its ABCMeta
    @property
    def threat_model(cls):
        CALLS.append("metaclass")
        return frozenset({"query"})


class Metaclass(Attack, metaclass=_Meta):
    name = "meta"
    game = "membership"


class Wider(frozenset):
    def __le__(self, other):
        CALLS.append("subclass")
        return True


class Subclassed(Attack):
    name = "subclassed"
    game = "membership"
    threat_model = Wider({"query"})


class Mutable(Attack):
    name = "mutable"
    game = "membership"
    threat_model = {"query"}


class Unknown(Attack):
    name = "unknown"
    game = "membership"
    threat_model = frozenset({"query", "root"})


def test_a_plain_class_is_read_with_its_entry_and_inherited_declarations() -> None:
    ref = static_attack(Plain)
    assert ref == AttackRef("plain", "membership", frozenset({"query", "population"}), "3",
                            f"{__name__}:Plain", {})
    inherited = attack_ref(Inherits, {"k": 1})
    assert inherited.threat_model == frozenset({"query"}) and inherited.version == "1"
    assert inherited.params == {"k": 1}
    assert attack_ref(Plain, threat_model=frozenset({"query"})).threat_model == frozenset({"query"}), "the plan's"


@pytest.mark.parametrize(("cls", "message"), [
    (Descriptor, "its class attribute 'name' must be a plain, non-empty str; it declares a _Descriptor"),
    (Metaclass, "its metaclass _Meta declares 'threat_model'"),
    (Subclassed, "its class attribute 'threat_model' must be a plain frozenset of capabilities; it declares a Wider"),
    (Mutable, "its class attribute 'threat_model' must be a plain frozenset of capabilities; it declares a set"),
    (Unknown, "its threat_model names unknown capabilities ['root']"),
])
def test_anything_but_plain_declarations_is_refused_without_running_them(cls: type, message: str) -> None:
    CALLS.clear()
    with pytest.raises(TypeError, match=f"^{re.escape(message)}"):
        static_attack(cls)
    assert CALLS == [], "no descriptor, property or operator of the plugin ran"
