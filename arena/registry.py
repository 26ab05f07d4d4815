"""Typed registries of plugin objects: base-class check, duplicates rejected, "did you mean" for unknown names."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class RegistryError(Exception):
    """A plugin registered something invalid (an instance where a class belongs, a wrong base class, a missing
    attribute, a duplicate name); the command line answers it with exit status 2."""


class UnknownNameError(KeyError):
    """A scenario named a plugin that no registry holds."""

    def __init__(self, kind: str, name: str, known: list[str], *, unavailable: str | None = None,
                 note: str | None = None) -> None:
        self.kind, self.name, self.known = kind, name, known
        if unavailable is not None:  # a broken distribution's: say which and why
            super().__init__(f"{kind} {name!r} is unavailable: {unavailable}")
            return
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
        super().__init__(f"unknown {kind} {name!r}; {hint}registered {kind}s: {', '.join(known) or '(none)'}"
                         + (f" ({note})" if note else ""))

    def __str__(self) -> str:
        return str(self.args[0])


def _a(kind: str) -> str:
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered object and the plugin (distribution) that registered it."""

    name: str
    obj: T
    plugin: str
    distribution: str
    version: str


class Registry(Generic[T]):
    """Name → object for one kind of plugin object.

    Plugins register classes: a subclass of ``base`` (``instances=False``, every plugin kind). A registry of
    declarations (``instances=True``: metrics) takes instances of ``base`` instead. ``check(obj)`` returns what
    else is wrong with an object of this kind (a missing class attribute), or None.
    """

    def __init__(self, kind: str, base: type, *, instances: bool = False,
                 check: Callable[[Any], str | None] | None = None) -> None:
        self.kind = kind
        self.base = base
        self.instances = instances
        self.check = check
        self._entries: dict[str, Entry[T]] = {}
        self._withheld: dict[str, str] = {}
        self.note: str | None = None
        """Said after every unknown name (the broken distributions, one of which may have provided it)."""

    def withhold(self, name: str, why: str) -> None:
        """Answer a lookup of ``name`` with ``why`` (its distribution is broken) instead of "unknown"."""
        self._withheld[name] = why

    def _problem(self, obj: object) -> str | None:
        """Why ``obj`` cannot be registered as this kind, or None."""
        base = f"arena.{self.base.__name__}"
        a_kind = _a(self.kind)
        if self.instances:
            if isinstance(obj, type) and issubclass(obj, self.base):
                return (f"registered the class {obj.__name__} as {a_kind}; register an instance: "
                        f"register({obj.__name__}(...))")
            if not isinstance(obj, self.base):
                return f"registered {obj!r} as {a_kind}, but it is not an instance of {base}"
            return None
        if isinstance(obj, type):
            if not issubclass(obj, self.base):
                return (f"registered the class {obj.__name__} as {a_kind}, but it is not a subclass of {base}; "
                        f"register a subclass of {base}")
            return None
        if isinstance(obj, self.base):
            cls = type(obj).__name__
            return f"registered an instance of {cls} as {a_kind}; register the class itself: register({cls})"
        return f"registered {obj!r} as {a_kind}, but it is not a subclass of {base}; register a subclass of {base}"

    def add(self, obj: T, *, plugin: str, distribution: str, version: str) -> None:
        """Register ``obj`` under its ``name`` attribute; reject wrong types and duplicates naming both plugins."""
        problem = self._problem(obj)
        if problem is not None:
            raise RegistryError(f"plugin {plugin!r} {problem}")
        name = getattr(obj, "name", None)
        if not isinstance(name, str) or not name:
            raise RegistryError(f"plugin {plugin!r} registered {_a(self.kind)} without a name: {obj!r}")
        problem = self.check(obj) if self.check is not None else None
        if problem is not None:
            raise RegistryError(f"plugin {plugin!r} registered {self.kind} {name!r}, which {problem}")
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
            raise UnknownNameError(self.kind, name, self.names(), unavailable=self._withheld.get(name),
                                   note=self.note) from None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(self._entries[n] for n in self.names())

    def __len__(self) -> int:
        return len(self._entries)
