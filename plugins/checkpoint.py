"""The ``checkpoint`` defense: a model trained elsewhere, attacked by the arena's attacks.

It trains nothing. It hands the membership game a user's trained weights (a ``state_dict`` saved by
``torch.save`` or safetensors) and the records they trained on: the game plays them as the release, with the
user's members and ``members`` of the user's non-members as the challenge (``arena.TrainedElsewhere``). Attacks
that train shadow models (``lira``, ``shadow-mia``, ``rmia``) train them with the track's model and recipe,
non-privately: the weights' own training procedure is not known to the arena. Claim: none (not DP).

Parameters: ``weights`` (``.pt``/``.pth``/``.bin`` read with ``torch.load(weights_only=True)``, which runs no
code, or ``.safetensors``), ``records`` (``.json`` ``{"members": [...], "nonmembers": [...]}`` or ``.npz`` with
the arrays ``members`` and ``nonmembers``: row indices into the track's dataset, as its loader orders them).
Paths are read from the directory ``arena`` runs in. The plan adds ``sha256``, the hash of both files, to the
configuration (so it is in every key and row, and a changed file is a new matchup); a file changed after
planning fails its matchup.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, Field, field_validator, model_validator

from arena import Defense, Fit, FitTask, PluginParams, TrainedElsewhere, hookimpl
from arena_plugins.defenses import NonPrivate

MAX_FILE_BYTES = 4 << 30
WEIGHT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors")
RECORD_SUFFIXES = (".json", ".npz")


def _regular(path: Path) -> Path:
    """``path`` when it is a regular file of sane size, else ``ValueError`` naming it."""
    try:
        info = path.stat()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not path.is_file():
        raise ValueError(f"{path}: not a regular file")
    if info.st_size > MAX_FILE_BYTES:
        raise ValueError(f"{path}: {info.st_size} bytes, more than the {MAX_FILE_BYTES} a checkpoint may have")
    return path


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    """The state_dict in ``path``: names → floating, finite tensors; ``ValueError`` naming the file and what is
    wrong (never unpickles code: ``weights_only=True``)."""
    path = _regular(path)
    suffix = path.suffix.lower()
    if suffix not in WEIGHT_SUFFIXES:
        raise ValueError(f"{path}: a {suffix or 'suffix-less'} file; weights are {', '.join(WEIGHT_SUFFIXES)}")
    try:
        if suffix == ".safetensors":
            from safetensors.torch import load_file

            state: Any = load_file(str(path), device="cpu")
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if "unsupported global" not in str(exc).lower():  # not a pickle of tensors at all
            raise ValueError(f"{path}: not a readable state_dict (UnpicklingError: not a torch.save file?); save "
                             "model.state_dict() with torch.save or safetensors") from None
        # weights_only refuses every object but tensors and plain containers
        raise ValueError(f"{path}: holds pickled objects other than tensors (a whole model or an optimiser?), "
                         "which torch.load(weights_only=True) refuses to run; save model.state_dict()") from None
    except Exception as exc:  # noqa: BLE001 - any failure to read means: not a checkpoint the arena can load
        detail = str(exc).splitlines()[0][:200] if str(exc) else "no detail"
        raise ValueError(f"{path}: not a readable state_dict ({type(exc).__name__}: {detail}); save "
                         "model.state_dict() with torch.save or safetensors") from None
    if not isinstance(state, dict) or not state:
        raise ValueError(f"{path}: holds a {type(state).__name__}, not a state_dict (a mapping of parameter names "
                         "to tensors); save model.state_dict()")
    for name, t in state.items():
        if not isinstance(name, str) or not isinstance(t, torch.Tensor):
            raise ValueError(f"{path}: {name!r}: a {type(t).__name__}, not a tensor; a state_dict maps parameter "
                             "names to tensors")
        if not t.is_floating_point():
            raise ValueError(f"{path}: {name}: dtype {t.dtype}, not floating point")
        if not torch.isfinite(t).all():
            raise ValueError(f"{path}: {name}: holds NaN or infinite values")
    return state


def _indices(value: Any, path: Path, field: str) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim != 1 or len(arr) == 0:
        raise ValueError(f"{path}: {field}: a non-empty list of record indices expected, got shape {arr.shape}")
    if arr.dtype.kind not in "iu" and not (arr.dtype.kind == "f" and np.all(arr == np.round(arr))):
        raise ValueError(f"{path}: {field}: record indices are whole numbers, not {arr.dtype} values")
    arr = arr.astype(np.int64)
    if (arr < 0).any():
        raise ValueError(f"{path}: {field}: index {int(arr[arr < 0][0])} is negative")
    if len(np.unique(arr)) != len(arr):
        raise ValueError(f"{path}: {field}: {len(arr) - len(np.unique(arr))} index(es) repeated")
    return arr


def load_records(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(members, nonmembers) of a records file; ``ValueError`` naming the file and the field."""
    path = _regular(path)
    suffix = path.suffix.lower()
    if suffix not in RECORD_SUFFIXES:
        raise ValueError(f"{path}: a {suffix or 'suffix-less'} file; records are .json or .npz")
    try:
        if suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise ValueError(f"{path}: a JSON {type(data).__name__}, not an object with members and nonmembers")
            found = {k: data[k] for k in ("members", "nonmembers") if k in data}
        else:
            with np.load(path, allow_pickle=False) as data:
                found = {k: np.asarray(data[k]) for k in ("members", "nonmembers") if k in data.files}
    except (UnicodeDecodeError, json.JSONDecodeError, zipfile.BadZipFile, OSError, EOFError) as exc:
        raise ValueError(f"{path}: not readable as {suffix} ({type(exc).__name__}: {exc})") from None
    for field in ("members", "nonmembers"):
        if field not in found:
            raise ValueError(f"{path}: {field}: missing (the file holds {', '.join(found) or 'neither'})")
    members, nonmembers = (_indices(found[f], path, f) for f in ("members", "nonmembers"))
    both = np.intersect1d(members, nonmembers)
    if len(both):
        raise ValueError(f"{path}: nonmembers: {len(both)} index(es) also in members (first {int(both[0])})")
    if len(nonmembers) < len(members):
        raise ValueError(f"{path}: nonmembers: {len(nonmembers)} indices, fewer than the {len(members)} members "
                         "(the game draws as many non-members as members)")
    return members, nonmembers


def files_sha256(*paths: Path) -> str:
    """SHA-256 over the files' bytes, in order."""
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            while block := f.read(1 << 20):
                h.update(block)
        h.update(b"\0")
    return h.hexdigest()


class CheckpointParams(PluginParams):
    weights: Path = Field(strict=False, description="a state_dict: .pt/.pth/.bin (torch.save) or .safetensors")
    records: Path = Field(strict=False, description='.json {"members": [...], "nonmembers": [...]} or .npz: '
                          "row indices into the track's dataset")
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$", description="the hash of both files "
                               "(set by the plan; given, it must match)")

    @field_validator("weights")
    @classmethod
    def _weights(cls, path: Path) -> Path:
        load_weights(path)
        return path

    @field_validator("records")
    @classmethod
    def _records(cls, path: Path) -> Path:
        load_records(path)
        return path

    @model_validator(mode="after")
    def _unchanged(self) -> CheckpointParams:
        if self.sha256 is not None and files_sha256(self.weights, self.records) != self.sha256:
            raise ValueError(f"{self.weights} or {self.records} changed since it was planned (sha256 "
                             f"{self.sha256[:12]}..., now {files_sha256(self.weights, self.records)[:12]}...)")
        return self


class Checkpoint(Defense):
    """A model trained elsewhere, with the records it trained on (members) and records it never saw
    (non-members): the membership game plays it as the release; shadow models train non-privately with the
    track's recipe. Claims nothing."""

    name = "checkpoint"
    Params = CheckpointParams
    params: CheckpointParams

    @classmethod
    def expand(cls, params: BaseModel) -> list[BaseModel]:
        """The configuration with ``sha256`` set: the files' content is then in every key and row."""
        p: CheckpointParams = params  # type: ignore[assignment]
        return [p if p.sha256 else p.model_copy(update={"sha256": files_sha256(p.weights, p.records)})]

    def validate_for(self, n_train: int) -> list[tuple[str, str]]:
        members, _ = load_records(self.params.records)
        if len(members) != n_train:
            return [("records", f"{self.params.records}: members: {len(members)} indices, but the track's game "
                                f"trains on {n_train} (set game.members to {len(members)}: the checkpoint's "
                                "training set is the game's members)")]
        return []

    def trained_elsewhere(self, dataset: Any, arch: Any) -> TrainedElsewhere:
        """The weights and records, checked against the track's dataset and model (``ValueError('field: file:
        ...')``, the game's convention, naming the parameter, the file and what in it is wrong)."""
        members, nonmembers = load_records(self.params.records)
        for field, idx in (("members", members), ("nonmembers", nonmembers)):
            if idx.max() >= dataset.n:
                raise ValueError(f"records: {self.params.records}: {field}: index {int(idx.max())} is out of range for "
                                 f"dataset {dataset.name!r} ({dataset.n} records)")
        state = load_weights(self.params.weights)
        template = arch.template()
        expected = {n: tuple(t.shape) for n, t in [*template.module.named_parameters(),
                                                   *template.module.named_buffers()]}
        got = {n: tuple(t.shape) for n, t in state.items()}
        if got != expected:
            missing = sorted(set(expected) - set(got))
            extra = sorted(set(got) - set(expected))
            shapes = sorted(n for n in set(got) & set(expected) if got[n] != expected[n])
            parts = ([f"missing {', '.join(missing)}"] if missing else []) + \
                ([f"unexpected {', '.join(extra)}"] if extra else []) + \
                [f"{n}: shape {list(got[n])}, the model's is {list(expected[n])}" for n in shapes]
            want = ", ".join(f"{n} {list(s)}" for n, s in expected.items())
            raise ValueError(f"weights: {self.params.weights}: does not fit the track's model {arch.model.name!r} "
                             f"({'; '.join(parts)}); its state_dict is: {want}")
        return TrainedElsewhere(members, nonmembers, state, NonPrivate(NonPrivate.Params()))

    def fit(self, task: FitTask) -> Fit:
        raise RuntimeError("the checkpoint defense releases a model trained elsewhere and trains nothing: only the "
                           "membership game plays it (its track's game is another)")


@hookimpl
def register_defenses(register) -> None:  # noqa: ANN001
    register(Checkpoint)
