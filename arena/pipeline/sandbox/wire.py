"""The sandbox's wire: what the arena and an attack's process say to each other over the attack's pipe.

Every message from the attack's process is a JSON header and raw tensor bytes (``encode``, ``decode``), never a
pickle: decoding one runs no code, and the guess it carries (``guess_message``) is rebuilt only as a class the
arena allows (``guess_fields``). Only the arena's side pickles (the boot message, the attack and its view, the
answers to the child's calls), because only the arena is trusted. ``Remote`` describes, in the pickled view, an
interface that stays in the arena and that the child reaches through a proxy.
"""

from __future__ import annotations

import dataclasses
import json
import math
import struct
import types
import typing
from typing import Any

import numpy as np
import torch

DTYPES = {str(d): d for d in (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8,
                              torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool)}
MAX_INT = 1 << 53
"""The largest magnitude of a whole number in a guess's header: exact as a float64, so no reader of the row
overflows or rounds it (``10**4000`` is refused at the wire, the attack's failure)."""
MAX_STR = 4096
"""The longest string in a guess's header."""
TRAIN_ATTRS = ("defense", "arch", "recipe", "solver", "device", "chunk")
"""The public description of a training procedure that its proxy carries (never the cache or any path)."""


@dataclasses.dataclass
class Remote:
    """A proxy's description: ``kind`` (query, labels, training) and public attributes."""

    kind: str
    attrs: dict[str, Any] = dataclasses.field(default_factory=dict)


def _tensor(value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().contiguous()
    array = np.asarray(value)
    if array.dtype == object or array.dtype.kind in "USV":
        raise TypeError(f"cannot send an array of dtype {array.dtype}: numbers only")
    return torch.from_numpy(np.ascontiguousarray(array.astype(array.dtype.newbyteorder("=")))).contiguous()


def encode(header: dict[str, Any], tensors: dict[str, Any]) -> bytes:
    """One message: a length-prefixed JSON header naming each tensor's dtype and shape, then their bytes."""
    specs, blobs = [], []
    for name, value in tensors.items():
        t = _tensor(value)
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        specs.append([name, str(t.dtype), list(t.shape), len(raw)])
        blobs.append(raw)
    head = json.dumps({**header, "tensors": specs}).encode()
    return struct.pack("<I", len(head)) + head + b"".join(blobs)


def decode(message: bytes) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The header and tensors of ``encode``'s message; ``ValueError`` for anything malformed (no code runs)."""
    (size,) = struct.unpack_from("<I", message)
    header = json.loads(message[4 : 4 + size].decode())
    if not isinstance(header, dict):
        raise ValueError("malformed message")
    tensors, offset = {}, 4 + size
    for name, dtype, shape, nbytes in header.pop("tensors", []):
        if dtype not in DTYPES or not all(isinstance(s, int) and s >= 0 for s in shape):
            raise ValueError(f"malformed tensor {name!r}")
        raw = bytearray(message[offset : offset + nbytes])
        offset += nbytes
        flat = torch.frombuffer(raw, dtype=DTYPES[dtype]) if nbytes else torch.empty(0, dtype=DTYPES[dtype])
        tensors[str(name)] = flat.reshape(shape)
    return header, tensors


def guess_message(guess: Any) -> bytes:
    """The attack's guess as a ``result`` message: its class's name and, for a dataclass, each field (``None``
    and numbers in the header, arrays as tensors, a dict of arrays as one tensor per key)."""
    if not (dataclasses.is_dataclass(guess) and not isinstance(guess, type)):
        return encode({"op": "result", "type": type(guess).__name__, "plain": {}}, {})
    tensors, plain, dicts = {}, {}, {}
    for f in dataclasses.fields(guess):
        v = getattr(guess, f.name)
        if v is None or isinstance(v, (int, float, str, bool)):
            plain[f.name] = v
        elif isinstance(v, dict):
            dicts[f.name] = [str(k) for k in v]
            tensors.update({f"{f.name}.{k}": a for k, a in v.items()})
        else:
            tensors[f.name] = v
    return encode({"op": "result", "type": type(guess).__name__, "plain": plain, "dicts": dicts}, tensors)


def guess_fields(header: dict[str, Any], tensors: dict[str, torch.Tensor], cls: type) -> dict[str, Any]:
    """The fields of a ``result`` message for the dataclass ``cls`` (arrays as NumPy arrays), to build it from;
    ``KeyError``, ``TypeError`` or ``ValueError`` for a malformed one, or a plain value out of bounds or of a type
    its field does not declare (``_plain``)."""
    fields: dict[str, Any] = {}
    dicts = header.get("dicts") or {}
    plain = header.get("plain") or {}
    if not isinstance(plain, dict):
        raise TypeError("malformed plain fields")
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve: the bounds alone apply
        hints = {}
    for f in dataclasses.fields(cls):
        if f.name in dicts:
            fields[f.name] = {str(k): tensors[f"{f.name}.{k}"].numpy() for k in dicts[f.name]}
        elif f.name in tensors:
            fields[f.name] = tensors[f.name].numpy()
        elif f.name in plain:
            fields[f.name] = _plain(f.name, plain[f.name], hints.get(f.name))
    return fields


def _plain(name: str, value: Any, hint: Any) -> Any:
    """A header value of a guess's field, bounded (``MAX_INT``, finite floats, ``MAX_STR``) and of a type its
    field's annotation allows (an ``int`` for a ``float``; never a ``bool`` for an ``int``); ``ValueError`` or
    ``TypeError`` naming the field otherwise."""
    if type(value) is int and abs(value) > MAX_INT:
        raise ValueError(f"field {name!r}: a whole number of {len(str(abs(value)))} digits, over 2^53")
    if type(value) is float and not math.isfinite(value):
        raise ValueError(f"field {name!r}: {value!r} is not a finite number")
    if type(value) is str and len(value) > MAX_STR:
        raise ValueError(f"field {name!r}: a string of {len(value)} characters, over {MAX_STR}")
    if value is not None and type(value) not in (int, float, str, bool):
        raise TypeError(f"field {name!r}: a {type(value).__name__} is not a plain value")
    if hint is None:
        return value
    allowed = set(typing.get_args(hint)) if typing.get_origin(hint) in (typing.Union, types.UnionType) else {hint}
    if type(value) in allowed or (type(value) is int and float in allowed) or (value is None and type(None) in allowed):
        return value
    names = " or ".join(sorted(getattr(a, "__name__", str(a)) for a in allowed))
    raise TypeError(f"field {name!r}: a {type(value).__name__}, where its class declares {names}")
