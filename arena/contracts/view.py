"""Views: exactly what an attack may see under its declared threat model, and nothing else.

A game's ``View`` subclass declares its items once, as annotations; an item that a capability grants says so in
its annotation, ``model: Annotated[BlackBox, Grant("query")]``; an item without a ``Grant`` goes to every attack
of the game. The game builds the view from all its items, ``MyView(attack.name, attack.threat_model, items)``,
and the view keeps what the attack's threat model grants and withholds the rest.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from arena.contracts.attack import Capability


class ThreatModelError(AttributeError):
    """An attack reached for something its threat model does not grant."""


@dataclass(frozen=True)
class Grant:
    """Annotation metadata of a view item: the capability an attack must declare to be given it."""

    capability: Capability


class View:
    """Read-only bag of granted items; asking for an ungranted capability raises ``ThreatModelError``.

    Subclasses declare the items (see the module's docstring); secrets (membership labels, targets) are never put
    in a view. ``items`` must hold exactly the declared items: one missing or one not declared is a ``TypeError``
    (a programming error of the game, not of the attack).
    """

    def __init__(self, attack: str, granted: frozenset[Capability], items: Mapping[str, Any]) -> None:
        declared = view_items(type(self))
        missing = sorted(set(declared) - set(items))
        extra = sorted(set(items) - set(declared))
        if missing or extra:
            raise TypeError(
                f"{type(self).__name__} declares {', '.join(declared) or 'no items'}; "
                + "; ".join(part for part in (
                    f"missing {', '.join(missing)}" if missing else "",
                    f"not declared: {', '.join(extra)}" if extra else "",
                ) if part)
            )
        kept = {name: value for name, value in items.items() if declared[name] is None or declared[name] in granted}
        withheld = {name: cap for name, cap in declared.items() if cap is not None and cap not in granted}
        object.__setattr__(self, "_attack", attack)
        object.__setattr__(self, "_items", kept)
        object.__setattr__(self, "_withheld", withheld)

    def __getattr__(self, name: str) -> Any:
        items = object.__getattribute__(self, "_items")
        if name in items:
            return items[name]
        withheld = object.__getattribute__(self, "_withheld")
        attack = object.__getattribute__(self, "_attack")
        if name in withheld:
            raise ThreatModelError(
                f"attack {attack!r} did not declare capability {withheld[name]!r}, which grants {name!r}"
            )
        raise ThreatModelError(f"the view of attack {attack!r} has no item {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a view is read-only")

    def __dir__(self) -> list[str]:
        return sorted(object.__getattribute__(self, "_items"))


_DECLARED: dict[type, dict[str, Capability | None]] = {}


def view_items(cls: type[View]) -> dict[str, Capability | None]:
    """The items ``cls`` declares, in declaration order: name → the capability that grants it (None: every attack
    gets it). ``ClassVar`` annotations and names starting with ``_`` are not items. A ``TypeError`` names the class
    when its annotations cannot be evaluated (a type imported only under ``TYPE_CHECKING``) or an item has two
    grants."""
    if cls in _DECLARED:
        return dict(_DECLARED[cls])
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception as exc:  # a NameError, or anything an annotation's evaluation raises
        raise TypeError(f"the annotations of view {cls.__qualname__} cannot be evaluated ({exc}): a view item's "
                        "type must be importable when the view is built, not only under TYPE_CHECKING") from exc
    out: dict[str, Capability | None] = {}
    for name, hint in hints.items():
        if name.startswith("_") or typing.get_origin(hint) is typing.ClassVar:
            continue
        grants = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Grant)]
        if len(grants) > 1:
            raise TypeError(f"view {cls.__qualname__}: item {name!r} has {len(grants)} grants; give it one")
        out[name] = grants[0].capability if grants else None
    _DECLARED[cls] = out
    return dict(out)


def view_capabilities(cls: type[View]) -> frozenset[Capability]:
    """Every capability that grants some item of ``cls``."""
    return frozenset(cap for cap in view_items(cls).values() if cap is not None)
