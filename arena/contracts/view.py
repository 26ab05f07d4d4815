"""Views: exactly what an attack may see under its declared threat model, and nothing else."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from arena.contracts.attack import Capability


class ThreatModelError(AttributeError):
    """An attack reached for something its threat model does not grant."""


class View:
    """Read-only bag of granted items; asking for an ungranted capability raises ``ThreatModelError``.

    Items that every attack of the game gets (e.g. the challenge records) are ``common``; the others are
    keyed by the capability that grants them. Secrets (membership labels, targets) are never put in a view.
    """

    def __init__(
        self,
        attack: str,
        granted: frozenset[Capability],
        common: Mapping[str, Any],
        by_capability: Mapping[Capability, Mapping[str, Any]],
    ) -> None:
        items = dict(common)
        withheld: dict[str, Capability] = {}
        for capability, values in by_capability.items():
            for name, value in values.items():
                if capability in granted:
                    items[name] = value
                else:
                    withheld[name] = capability
        object.__setattr__(self, "_attack", attack)
        object.__setattr__(self, "_items", items)
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
