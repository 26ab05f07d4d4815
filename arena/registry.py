"""Typed registries of plugin objects: base-class check, duplicates rejected, "did you mean" for unknown names."""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


class RegistryError(Exception):
    """A plugin registered something invalid (wrong type, duplicate name)."""


class UnknownNameError(KeyError):
    """A scenario named a plugin that no registry holds."""

    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        self.kind, self.name, self.known = kind, name, known
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
        super().__init__(f"unknown {kind} {name!r}; {hint}registered {kind}s: {', '.join(known) or '(none)'}")

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered object and the plugin (distribution) that registered it."""

    name: str
    obj: T
    plugin: str
    distribution: str
    version: str


class Registry(Generic[T]):
    """Name → object for one kind of plugin object."""

    def __init__(self, kind: str, base: type) -> None:
        self.kind = kind
        self.base = base
        self._entries: dict[str, Entry[T]] = {}

    def add(self, obj: T, *, plugin: str, distribution: str, version: str) -> None:
        """Register ``obj`` under its ``name`` attribute; reject wrong types and duplicates naming both plugins."""
        target = obj if isinstance(obj, type) else type(obj)
        if not issubclass(target, self.base):
            raise RegistryError(
                f"plugin {plugin!r} registered {obj!r} as a {self.kind}, but it is not a {self.base.__name__}"
            )
        name = getattr(obj, "name", None)
        if not isinstance(name, str) or not name:
            raise RegistryError(f"plugin {plugin!r} registered a {self.kind} without a name: {obj!r}")
        if name in self._entries:
            first = self._entries[name]
            raise RegistryError(
                f"{self.kind} {name!r} is registered twice: by plugin {first.plugin!r} "
                f"({first.distribution} {first.version}) and by plugin {plugin!r} ({distribution} {version})"
            )
        self._entries[name] = Entry(name, obj, plugin, distribution, version)

    def get(self, name: str) -> T:
        """The object registered as ``name``; unknown names raise ``UnknownNameError`` with suggestions."""
        return self.entry(name).obj

    def entry(self, name: str) -> Entry[T]:
        """The full registration record of ``name``."""
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, self.names()) from None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(self._entries[n] for n in self.names())

    def __len__(self) -> int:
        return len(self._entries)
