"""Which recipe fields a defense follows: a field the scenario puts in effect that a defense does not honour
(``Defense.honours``, e.g. a plain-PyTorch defense that ignores ``training.ema``) is a problem of the scenario,
named at the field that sets it, instead of a result that silently ignores it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from arena.contracts.defense import Defense
from arena.contracts.spec import AugmentSpec, EntryRef, TrainingOverride, TrainingSpec


def in_effect(training: TrainingSpec, l2: float) -> dict[str, Any]:
    """The recipe fields that ask something of a defense, with their values: epochs and lr always; momentum, ema
    and l2 above 0, a batch size, augmentation, and the Newton solver (without it a defense trains by gradient
    steps, which every defense does)."""
    asked: dict[str, Any] = {"epochs": training.epochs, "lr": training.lr}
    for name, neutral in (("batch_size", None), ("momentum", 0.0), ("ema", 0.0), ("augment", AugmentSpec())):
        if getattr(training, name) != neutral:
            asked[name] = getattr(training, name)
    if training.solver == "newton":
        asked["solver"] = "newton"
    if l2 > 0:
        asked["l2"] = l2
    return asked


def unhonoured(source: str, where: str, j: int, cls: type[Defense], ref: EntryRef, training: TrainingSpec,
               l2: float) -> list[str]:
    """One problem per recipe field in effect for the defense entry ``j`` of track ``where`` (its effective
    ``training``, the model's ``l2``) that its class does not honour, at the field that sets it: the entry's
    ``training`` override, the track's ``training`` or the track's ``model.l2``."""
    override = ref.options.get("training")
    override = override if isinstance(override, dict) else {}
    entry = f"{where}.defenses[{j}]"
    problems = []
    for name, value in in_effect(training, l2).items():
        if name in cls.honours:
            continue
        shown = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
        if name == "l2":
            at, fix = f"{where}.model.l2", "train it on a track whose model has no l2"
        elif name in override:
            at, fix = f"{entry}.training.{name}", "drop it from this entry's training"
        elif name in TrainingOverride.model_fields:
            at, fix = f"{where}.training.{name}", f"set it back to its neutral value in {entry}.training"
        else:
            at, fix = f"{where}.training.{name}", "train it on a track of its own"
        field = f"{'model' if name == 'l2' else 'training'}.{name}"
        honoured = ", ".join(sorted(cls.honours)) or "none"
        problems.append(f"{source}: {at}: defense {cls.name!r} ({entry}) does not honour {field} = {shown!r} "
                        f"(it follows only: {honoured}); {fix}")
    return problems


def unmet(source: str, where: str, j: int, cls: type[Defense], training: TrainingSpec, l2: float) -> list[str]:
    """One problem per recipe field the defense entry ``j`` requires (``Defense.requires``) that its effective
    ``training`` leaves at its neutral value."""
    asked = in_effect(training, l2)
    return [f"{source}: {where}.training.{name}: defense {cls.name!r} ({where}.defenses[{j}]) needs "
            f"training.{name} in effect; set it in the track's or this entry's training"
            for name in sorted(getattr(cls, "requires", frozenset())) if name not in asked]
