"""What the arena knows of an attack without running any of its code: its class's declarations, read statically.

The arena never builds an attack, never reads an attribute of one and never pickles one: an attack is known here
by ``AttackRef``, built from its registered class by ``attack_ref``. Every declaration is read from the
dictionaries of the class and its bases (``static_attack``), never through ``getattr``, so no descriptor,
metaclass property or ``__getattr__`` of the plugin runs; each must be a plain value: ``name`` and ``game`` an
exact ``str``, ``threat_model`` an exact ``frozenset`` of exact ``str`` among the known capabilities, ``version``
an exact ``str`` (or ``int``). Anything else is refused with ``TypeError`` naming the attribute, which the plan
reports as a problem of the scenario. The attack's process (``arena.pipeline.sandbox.child``) imports the class from
``AttackRef.entry``, validates ``params`` and builds it there.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Any

from arena.contracts.attack import Capability

CAPABILITIES: frozenset[str] = frozenset(typing.get_args(Capability))
_MRO = type.__dict__["__mro__"]
_DICT = type.__dict__["__dict__"]
_QUALNAME = type.__dict__["__qualname__"]
_ABSENT = object()


def class_value(cls: type, name: str) -> Any:
    """``name`` as the class ``cls`` or one of its bases declares it, without running anything of theirs: the
    first class dictionary along the method resolution order that holds it (``_ABSENT`` for none). A metaclass
    of the plugin that declares ``name`` itself (a property that would shadow the class's value) is refused."""
    if not isinstance(cls, type):
        raise TypeError(f"{cls!r} is not a class")
    for meta in _MRO.__get__(type(cls)):
        if meta is not type and meta is not object and _own(meta, name) is not _ABSENT:
            raise TypeError(f"its metaclass {_QUALNAME.__get__(meta)} declares {name!r}")
    for klass in _MRO.__get__(cls):
        value = _own(klass, name)
        if value is not _ABSENT:
            return value
    return _ABSENT


def _own(klass: type, name: str) -> Any:
    for key, value in _DICT.__get__(klass).items():  # keys compared only when they are exact str: no __eq__ runs
        if type(key) is str and key == name:
            return value
    return _ABSENT


def _plain_str(cls: type, name: str, *, allow_int: bool = False) -> str:
    value = class_value(cls, name)
    if type(value) is str and value:
        return str.__str__(value)
    if allow_int and type(value) is int:
        return int.__repr__(value)
    what = "nothing" if value is _ABSENT else f"a {type(value).__name__}"
    raise TypeError(f"its class attribute {name!r} must be a plain, non-empty str; it declares {what}")


def _threat_model(cls: type) -> frozenset[str]:
    value = class_value(cls, "threat_model")
    if type(value) is not frozenset:
        what = "nothing" if value is _ABSENT else f"a {type(value).__name__}"
        raise TypeError(f"its class attribute 'threat_model' must be a plain frozenset of capabilities; it declares "
                        f"{what}")
    items = list(frozenset.__iter__(value))
    odd = [i for i in items if type(i) is not str]
    if odd:
        raise TypeError(f"its threat_model holds a {type(odd[0]).__name__}, not a capability name (str)")
    unknown = sorted(str.__str__(i) for i in items if i not in CAPABILITIES)
    if unknown:
        raise TypeError(f"its threat_model names unknown capabilities {unknown}; known: {sorted(CAPABILITIES)}")
    return frozenset(str.__str__(i) for i in items)


@dataclass(frozen=True)
class AttackRef:
    """An attack as the arena knows it: its registered class's declarations (read statically), where its class
    is (``entry``, ``module:qualname``) and its parameters in JSON form. The game builds the view from this
    (``name``, the planned ``threat_model``) and scores the guess with it; the attack itself exists only in its
    own process."""

    name: str
    game: str
    threat_model: frozenset[str]
    version: str
    entry: str
    params: dict[str, Any] = field(default_factory=dict)
    site: bool = False
    """Its class is imported from the untrusted site (``arena.trust``): its process adds that site to its path."""


def static_attack(cls: type) -> AttackRef:
    """``cls``'s declarations (no parameters): ``TypeError`` naming the first that is not a plain value."""
    if not isinstance(cls, type):
        raise TypeError(f"{cls!r} is not a class")
    module = _own(cls, "__module__")  # every class's own dictionary holds it
    qualname = _QUALNAME.__get__(cls)
    if type(module) is not str or type(qualname) is not str:
        raise TypeError("its class has no plain __module__ and __qualname__")
    game = "" if class_value(cls, "game") is _ABSENT else _plain_str(cls, "game")  # registration requires one
    site = _own(cls, "sandboxed") is True and _own(cls, "untrusted_site") is True  # set by the arena's stand-in
    return AttackRef(name=_plain_str(cls, "name"), game=game, threat_model=_threat_model(cls),
                     version=_plain_str(cls, "version", allow_int=True),
                     entry=f"{str.__str__(module)}:{str.__str__(qualname)}", site=site)


def attack_ref(cls: type, params: dict[str, Any] | None = None, *,
               threat_model: frozenset[str] | None = None) -> AttackRef:
    """The reference the sandbox plays ``cls`` by, with ``params`` (JSON form, validated in the attack's process)
    and, where the plan fixed it, the planned ``threat_model`` (else the class's, read statically)."""
    ref = static_attack(cls)
    planned = ref.threat_model if threat_model is None else frozenset(threat_model)
    return AttackRef(ref.name, ref.game, planned, ref.version, ref.entry, dict(params or {}), ref.site)
