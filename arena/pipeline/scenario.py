"""Scenario files: pydantic models (unknown keys forbidden), safe YAML loading, and error messages with field paths."""

from __future__ import annotations

import codecs
import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from arena.contracts.spec import MAX_SEEDS, Scenario


class ScenarioError(Exception):
    """One or more problems in scenario files; each problem names the file and the field path."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


def field_path(loc: tuple[Any, ...]) -> str:
    """('tracks', 0, 'defenses', 1, 'epsilons') -> 'tracks[0].defenses[1].epsilons'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def pydantic_problems(source: str, prefix: str, exc: ValidationError) -> list[str]:
    """One line per pydantic error: 'file: field.path: message'."""
    return error_problems(source, prefix, exc.errors())


def error_problems(source: str, prefix: str, errors: Any) -> list[str]:
    """``pydantic_problems`` for errors as ``ValidationError.errors()`` lists them (dicts of ``loc``, ``msg``,
    ``type``, ``input``), e.g. as they came back from the sandbox's validation of an attack's parameters."""
    problems = []
    for err in errors:
        path = field_path(err["loc"])
        full = f"{prefix}.{path}" if prefix and path != "(top level)" else (prefix or path)
        problems.append(f"{source}: {full}: {err['msg']}{_bool_hint(err)}")
    return problems


MAX_DEPTH = 64
"""Deepest nesting of lists and mappings a scenario file may have (real scenarios stay under 10)."""
MAX_NODES = 5_000_000
"""Most YAML nodes a file may expand to, counting every use of an alias (refuses 'billion laughs' files)."""
MAX_BYTES = 8 * 1024 * 1024
"""Largest scenario file read at all, unless ``ARENA_MAX_SCENARIO_BYTES`` allows more (checked before parsing)."""
BYTES_ENV = "ARENA_MAX_SCENARIO_BYTES"
MAX_NAME = 64
"""Longest scenario or track name (labels have their own bound, ``arena.contracts.spec.MAX_LABEL``)."""
MAX_ITEMS = MAX_SEEDS
"""Longest list a scenario file may hold (the seeds' bound, the largest of any field): refused while parsing, so
that a file of millions of items is not built node by node first."""
MAX_INT_DIGITS = 64
"""Most digits an integer in a scenario file may have: no field takes a larger one (Python refuses > 4,300)."""
_SEXAGESIMAL = re.compile(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$")
"""YAML 1.1 base-60 numbers (``1:30`` = 90); YAML 1.2 reads them as strings, and so do we."""

_DECIMAL = re.compile(r"^(?:0|[1-9][0-9]*)$")
_FLOAT_WITH_EXPONENT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")
"""YAML 1.2 floats with an exponent that YAML 1.1 reads as strings: ``1e-3`` (no dot), ``1.5e2`` (unsigned exponent)."""
_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"), (codecs.BOM_UTF16_LE, "UTF-16"),
         (codecs.BOM_UTF16_BE, "UTF-16"))


def _bool_hint(err: Any) -> str:
    """Strict numbers refuse ``true``; say so, since pydantic's message alone reads as if no value were given."""
    if isinstance(err.get("input"), bool) and err["type"] in {"int_type", "float_type"}:
        return f" (got {str(err['input']).lower()}: a boolean is not a number)"
    return ""


class _ScenarioLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Safe YAML (the C parser where available) that rejects every explicit tag and every repeated key, and reads
    ``1e-3`` and ``1.5e2`` as numbers as YAML 1.2 does."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._where: list[Any] = []

    def descend_resolver(self, current_node: yaml.Node | None, current_index: Any) -> None:
        """Called by the composer before each node: remember the path to it, and refuse the item past
        ``MAX_ITEMS`` of a list (the index is the item's position; for a mapping's value, its key node)."""
        if type(current_index) is int and current_index >= MAX_ITEMS:
            raise _ListTooLongError(self._field(), current_node.start_mark if current_node is not None else None)
        self._where.append(current_index)

    def ascend_resolver(self) -> None:
        self._where.pop()

    def _field(self) -> str:
        """The field path of the list being composed, as pydantic's messages write it ('tracks[0].seeds')."""
        parts = [p.value if isinstance(p, yaml.ScalarNode) else p for p in self._where[1:]]
        return field_path(tuple(part if isinstance(part, (int, str)) else "?" for part in parts))

    def resolve(self, kind: type, value: str | None, implicit: tuple[bool, bool]) -> str:
        """Plain decimal integers (most of a large file) skip the resolver's list of patterns; same tags."""
        # A scalar node's value is always a string (None is for sequences and mappings).
        if kind is yaml.ScalarNode and implicit[0] and value is not None:
            if _DECIMAL.match(value):
                return "tag:yaml.org,2002:int"
            if ":" in value and _SEXAGESIMAL.match(value):
                return "tag:yaml.org,2002:str"
        return super().resolve(kind, value, implicit)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """Plain decimal integers are built directly, without the constructor's bookkeeping; an integer of more
        than ``MAX_INT_DIGITS`` digits is refused before Python is asked to build it."""
        if type(node) is yaml.ScalarNode and node.tag == "tag:yaml.org,2002:int":
            # the length first: it bounds the digits, and counting them for each of 700,000 seeds is slow
            if len(node.value) > MAX_INT_DIGITS and sum(c.isalnum() for c in node.value) > MAX_INT_DIGITS:
                raise yaml.constructor.ConstructorError(
                    None, None, f"an integer of {len(node.value)} characters: no field takes one so large",
                    node.start_mark)
            value = node.value
            if value.isascii() and value.isdigit() and (value[0] != "0" or len(value) == 1):  # plain decimal
                return int(value)
        return super().construct_object(node, deep)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """A mapping whose keys are all distinct: a repeated key would silently drop the first value."""
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark)
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, "a mapping key must be a plain value", key_node.start_mark) from None
            if first is not key_node.start_mark:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first given on line {first.line + 1})", key_node.start_mark)
        return super().construct_mapping(node, deep)


class _ListTooLongError(Exception):
    """A list in the file longer than ``MAX_ITEMS`` (raised while composing, before the rest is read)."""

    def __init__(self, field: str, mark: yaml.Mark | None) -> None:
        self.field, self.mark = field, mark


def _reject_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    raise yaml.constructor.ConstructorError(
        None, None, f"tag {node.tag!r} is not allowed in scenario files", node.start_mark
    )


_ScenarioLoader.add_multi_constructor("tag:yaml.org,2002:python/", _reject_tag)
_ScenarioLoader.add_multi_constructor("!", _reject_tag)
_ScenarioLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_WITH_EXPONENT, list("-+0123456789."))


def _decode(path: Path, raw: bytes) -> str:
    """UTF-8 text of a scenario file; other encodings are named, never guessed."""
    for bom, encoding in _BOMS:
        if raw.startswith(bom):
            raise ScenarioError([f"{path}: (file): encoded as {encoding}; save it as UTF-8"])
    if b"\x00" in raw:
        raise ScenarioError([f"{path}: (file): holds NUL bytes (UTF-16 or binary?); save it as UTF-8 text"])
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ScenarioError([f"{path}: (file): not UTF-8 text: invalid byte at line {line} (offset {exc.start})"]) \
            from None


def max_bytes() -> int:
    """The size cap: ``ARENA_MAX_SCENARIO_BYTES`` where it is a positive integer, ``MAX_BYTES`` otherwise."""
    text = os.environ.get(BYTES_ENV, "")
    return int(text) if text.isdigit() and len(text) <= 15 and int(text) > 0 else MAX_BYTES


def _names_problems(path: Path, scenario: Scenario) -> list[str]:
    """Names longer than ``MAX_NAME``: they would pass into every row, key, table and file name."""
    named = [("name", scenario.name)] + [(f"tracks[{i}].name", t.name) for i, t in enumerate(scenario.tracks)]
    return [f"{path}: {where}: {len(name)} characters, more than the {MAX_NAME} a name may have"
            for where, name in named if len(name) > MAX_NAME]


def _read_bytes(path: Path) -> bytes:
    """The file's bytes; a FIFO, device or directory is refused before reading (it could block or never end)."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise ScenarioError([f"{path}: (file): not a regular file"])
        limit = max_bytes()
        if info.st_size > limit:
            raise ScenarioError([f"{path}: (file): {info.st_size} bytes, more than the {limit} a scenario may have "
                                 f"(set {BYTES_ENV} to allow more)"])
        return path.read_bytes()
    except OSError as exc:
        raise ScenarioError([f"{path}: cannot read file: {exc.strerror or exc}"]) from None


def _check_shape(path: Path, root: yaml.Node) -> None:
    """Refuse nesting deeper than MAX_DEPTH, self-referring aliases and documents expanding past MAX_NODES before
    anything recurses on them (construction and validation recurse; aliases can multiply a small file).

    Iterative post-order over the collection nodes, each visited once however many aliases point at it."""
    height: dict[int, int] = {}
    size: dict[int, int] = {}
    stack = [_Frame(root)]
    open_ids = {id(root)}
    while stack:
        frame = stack[-1]
        child = next(frame.pending, None)
        if child is not None:
            if id(child) in open_ids:
                raise ScenarioError([f"{path}: (file): line {child.start_mark.line + 1}: an alias refers to itself"])
            if id(child) not in height:
                open_ids.add(id(child))
                stack.append(_Frame(child))
            continue
        stack.pop()
        node = frame.node
        open_ids.discard(id(node))
        height[id(node)] = 1 + max((height[id(c)] for c in frame.collections), default=0)
        size[id(node)] = 1 + frame.scalars + sum(size[id(c)] for c in frame.collections)
        if height[id(node)] > MAX_DEPTH or len(stack) >= MAX_DEPTH:
            raise ScenarioError([f"{path}: (file): line {node.start_mark.line + 1}: "
                                 f"nested more than {MAX_DEPTH} levels deep"])
        if size[id(node)] > MAX_NODES:
            raise ScenarioError([f"{path}: (file): expands to more than {MAX_NODES} values (aliases?)"])


class _Frame:
    """One collection node on ``_check_shape``'s stack: its collection children (still to visit) and scalars."""

    def __init__(self, node: yaml.Node) -> None:
        children = node.value if isinstance(node, yaml.SequenceNode) else [n for pair in node.value for n in pair]
        self.node = node
        self.collections = [c for c in children if not isinstance(c, yaml.ScalarNode)]
        self.scalars = len(children) - len(self.collections)
        self.pending = iter(self.collections)


def read_yaml(path: Path) -> Any:
    """Parse a scenario file with safe loading; raise ``ScenarioError`` for unreadable, mis-encoded, too deeply
    nested, or invalid YAML (repeated keys and explicit tags included)."""
    path = Path(path)
    text = _decode(path, _read_bytes(path))
    loader = _ScenarioLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        if not isinstance(root, yaml.ScalarNode):
            _check_shape(path, root)
        return loader.construct_document(root)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = getattr(exc, "problem", None) or str(exc)
        raise ScenarioError([f"{path}: invalid YAML: {where}{what}"]) from None
    except _ListTooLongError as exc:
        where = f" (line {exc.mark.line + 1})" if exc.mark else ""
        raise ScenarioError([f"{path}: {exc.field}: List should have at most {MAX_ITEMS} items; the file gives more"
                             f"{where}"]) from None
    except RecursionError:
        raise ScenarioError([f"{path}: (file): nested more than {MAX_DEPTH} levels deep"]) from None
    except ValueError as exc:  # a number the constructor cannot build (int() past its digit limit, say)
        raise ScenarioError([f"{path}: invalid YAML: {str(exc)[:200]}"]) from None
    finally:
        loader.dispose()


def parse_scenario(path: Path) -> Scenario:
    """Read and validate the shape of one scenario file (plugin names and parameters are checked later)."""
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ScenarioError([f"{path}: (top level): expected a mapping with name, seeds and tracks"])
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(pydantic_problems(str(path), "", exc)) from None
    if problems := _names_problems(path, scenario):
        raise ScenarioError(problems)
    return scenario
