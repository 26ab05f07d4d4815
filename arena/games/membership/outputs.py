"""Bring your own outputs: the output-based membership attacks run on model outputs a user saved
(``arena.evaluate_outputs``, ``arena evaluate-outputs FILE``), like TF Privacy's ``AttackInputData``.

Per record, the target's logits (or losses) and reference models' logits (or losses), with each reference's
membership mask where known and the target's membership (for scoring). The attacks are the built-in plugins'
formulas (``arena.games.membership.formulas``, the functions ``lira`` and ``rmia`` call), so the same outputs give
the same scores as a matchup; each attack's scores are then evaluated as ``arena evaluate`` evaluates scores
(``Evaluation``: every metric, its bootstrap interval, the ROC figure).

The ``.npz`` fields (``OUTPUT_FIELDS``; read with the checks of ``arena evaluate``: sizes declared before
decompressing, no pickles, every problem an ``EvaluationInputError`` naming the field):

- ``target_logits`` [n, C] (logits or log-probabilities) or ``target_losses`` [n] (cross-entropy); ``labels`` [n]
  (the records' classes, with logits); ``is_member`` [n] (0/1: the target trained on the record).
- ``reference_logits`` [K, n, C] or ``reference_losses`` [K, n] (the same kind as the target's), and
  ``reference_in`` [K, n] (0/1: reference k trained on record i). Without ``reference_in`` every reference counts
  as OUT for every record (offline attacks only).
- ``population_labels`` [m], ``population_logits`` [m, C] or ``population_losses`` [m], and
  ``population_reference_logits`` [K, m, C] or ``population_reference_losses`` [K, m]: records from the same
  distribution in no reference's and not in the target's training set: RMIA's population Z, and where each
  attack's hard threshold is set (a population FPR of ``fpr``; without them, no decisions).

The attacks: ``loss-threshold`` (score −loss), ``lira-online`` and ``lira-offline`` (φ = log(p_y / (1 − p_y))),
``rmia-online`` and ``rmia-offline`` (Pr(x|θ) at temperature 1, γ = 1, Z = the whole population); one that the
arrays cannot support is skipped, with the reason.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arena.games.membership import formulas as f
from arena.games.membership.evaluate import (
    CONFIDENCE,
    Evaluation,
    EvaluationInputError,
    _binary,
    checked_file,
    evaluate,
    read_npz,
)

OUTPUT_FIELDS = ("labels", "target_logits", "target_losses", "is_member", "reference_logits", "reference_losses",
                 "reference_in", "population_labels", "population_logits", "population_losses",
                 "population_reference_logits", "population_reference_losses")
"""The arrays an outputs file may hold."""
ATTACKS = ("loss-threshold", "lira-online", "lira-offline", "rmia-online", "rmia-offline")


@dataclass(frozen=True)
class Outputs:
    """Checked outputs: the kind (``logits`` or ``losses``), the target's and references' outputs on the records
    and on the population (None where not given), labels, memberships."""

    kind: str
    target: np.ndarray
    labels: np.ndarray | None
    is_member: np.ndarray
    references: np.ndarray | None
    reference_in: np.ndarray | None
    population: np.ndarray | None
    population_labels: np.ndarray | None
    population_references: np.ndarray | None

    def log_odds(self, values: np.ndarray, labels: np.ndarray | None) -> np.ndarray:
        """LiRA's φ of outputs [..., n(, C)] (``f.true_class_log_odds``, or ``f.loss_log_odds`` of losses)."""
        if self.kind == "losses":
            return f.loss_log_odds(values)
        return f.true_class_log_odds(torch.from_numpy(values), torch.from_numpy(labels))

    def log_prob(self, values: np.ndarray, labels: np.ndarray | None) -> np.ndarray:
        """RMIA's log Pr(x|θ) at temperature 1 (``f.true_class_log_prob``, or −loss)."""
        if self.kind == "losses":
            return -np.asarray(values, dtype=np.float64)
        return f.true_class_log_prob(torch.from_numpy(values), torch.from_numpy(labels), 1.0)

    def losses(self, values: np.ndarray, labels: np.ndarray | None) -> np.ndarray:
        return -self.log_prob(values, labels)


def _real(name: str, value: Any, ndim: int) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind not in "fiu":
        raise EvaluationInputError(name, f"{arr.dtype} values: real numbers expected")
    if arr.ndim != ndim:
        raise EvaluationInputError(name, f"shape {arr.shape}: {ndim} dimensions expected")
    if arr.size == 0:
        raise EvaluationInputError(name, "empty")
    bad = ~np.isfinite(arr)
    if bad.any():
        raise EvaluationInputError(name, f"{int(bad.sum())} value(s) NaN or infinite")
    return arr if arr.dtype.kind == "f" else arr.astype(np.float64)


def _shape(name: str, arr: np.ndarray, shape: tuple[int, ...], meaning: str) -> None:
    if arr.shape != shape:
        raise EvaluationInputError(name, f"shape {arr.shape}, expected {shape} ({meaning})")


def _labels(name: str, value: Any, n: int, classes: int) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise EvaluationInputError(name, f"{arr.dtype} values: class indices (whole numbers) expected")
    _shape(name, arr, (n,), "one class per record")
    bad = (arr < 0) | (arr >= classes)
    if bad.any():
        raise EvaluationInputError(name, f"class {int(arr[bad][0])} at row {int(np.argmax(bad)) + 1} is outside "
                                         f"[0, {classes}) (the logits have {classes} classes)")
    return arr.astype(np.int64)


def _one_of(found: Mapping[str, Any], logits: str, losses: str, required: bool) -> tuple[str, str | None]:
    if logits in found and losses in found:
        raise EvaluationInputError(losses, f"give {logits} or {losses}, not both")
    if logits in found:
        return "logits", logits
    if losses in found:
        return "losses", losses
    if required:
        raise EvaluationInputError(logits, f"missing (or {losses})")
    return "", None


def check_outputs(found: Mapping[str, Any]) -> Outputs:
    """The arrays of an outputs file as ``Outputs``, or ``EvaluationInputError`` naming the first bad field."""
    kind, name = _one_of(found, "target_logits", "target_losses", required=True)
    assert name is not None
    target = _real(name, found[name], 2 if kind == "logits" else 1)
    n = target.shape[0]
    classes = target.shape[1] if kind == "logits" else 0
    if kind == "logits" and classes < 2:
        raise EvaluationInputError(name, f"shape {target.shape}: logits of at least 2 classes expected")
    if kind == "losses" and (target < 0).any():
        raise EvaluationInputError(name, "negative values: cross-entropy losses are ≥ 0")
    labels = None
    if kind == "logits":
        if "labels" not in found:
            raise EvaluationInputError("labels", "missing: the records' classes, to read the logits")
        labels = _labels("labels", found["labels"], n, classes)
    if "is_member" not in found:
        raise EvaluationInputError("is_member", "missing: the target's membership of each record, to score")
    member = np.asarray(found["is_member"])
    if member.ndim != 1 or len(member) != n:
        raise EvaluationInputError("is_member", f"shape {member.shape}, expected ({n},) (one value per record)")
    member = _binary(member, "is_member")
    if member.all() or not member.any():
        raise EvaluationInputError("is_member", f"needs members and non-members, got {int(member.sum())} and "
                                                f"{int((~member).sum())}")
    tail = (classes,) if kind == "logits" else ()
    rkind, rname = _one_of(found, "reference_logits", "reference_losses", required=False)
    refs = ref_in = None
    if rname is not None:
        if rkind != kind:
            raise EvaluationInputError(rname, f"{rkind}, but the target's outputs are {kind}: give the same kind")
        refs = _real(rname, found[rname], 2 + len(tail))
        _shape(rname, refs, (refs.shape[0], n, *tail), "references × records" + (" × classes" if tail else ""))
        if "reference_in" in found:
            ref_in = np.asarray(found["reference_in"])
            _shape("reference_in", ref_in, refs.shape[:2], "references × records")
            ref_in = _binary(ref_in.reshape(-1), "reference_in").reshape(refs.shape[:2])
    elif "reference_in" in found:
        raise EvaluationInputError("reference_in", "given without reference_logits or reference_losses")
    pkind, pname = _one_of(found, "population_logits", "population_losses", required=False)
    prkind, prname = _one_of(found, "population_reference_logits", "population_reference_losses", required=False)
    population = pop_labels = pop_refs = None
    if pname is not None or prname is not None or "population_labels" in found:
        if pname is None:
            raise EvaluationInputError(f"population_{kind}", "missing: the target's outputs on the population")
        if pkind != kind:
            raise EvaluationInputError(pname, f"{pkind}, but the target's outputs are {kind}: give the same kind")
        population = _real(pname, found[pname], 1 + len(tail))
        m = population.shape[0]
        _shape(pname, population, (m, *tail), "population records" + (" × classes" if tail else ""))
        if kind == "logits":
            if "population_labels" not in found:
                raise EvaluationInputError("population_labels", "missing: the population records' classes")
            pop_labels = _labels("population_labels", found["population_labels"], m, classes)
        if refs is not None:
            if prname is None:
                raise EvaluationInputError(f"population_reference_{kind}", "missing: the references' outputs on the "
                                           "population (population records are OUT for every reference)")
            if prkind != kind:
                raise EvaluationInputError(prname, f"{prkind}, but the target's outputs are {kind}")
            pop_refs = _real(prname, found[prname], 2 + len(tail))
            _shape(prname, pop_refs, (refs.shape[0], m, *tail), "the same references × population records")
        elif prname is not None:
            raise EvaluationInputError(prname, "given without the references' outputs on the records")
    return Outputs(kind, target, labels, member, refs, ref_in, population, pop_labels, pop_refs)


def read_outputs(path: Path | str) -> Outputs:
    """The checked arrays of an outputs ``.npz`` (``OUTPUT_FIELDS``), read as ``arena evaluate`` reads scores."""
    path = checked_file(path, (".npz",))
    try:
        found = read_npz(path, OUTPUT_FIELDS, (), "an outputs file")
    except PermissionError as exc:
        raise EvaluationInputError("(file)", f"cannot read: {exc.strerror or exc}") from None
    return check_outputs(found)


def _threshold(population_scores: np.ndarray | None, fpr: float) -> float | None:
    return None if population_scores is None else float(np.quantile(population_scores, 1.0 - fpr))


def attack_scores(o: Outputs, attack: str, *, fixed_variance: bool = False,
                  fpr: float = 0.1) -> tuple[np.ndarray, np.ndarray | None]:
    """(scores [n], decisions [n] or None) of one attack (``ATTACKS``) on ``o``; ``ValueError`` saying why the
    arrays cannot support it."""
    pop = o.population
    if attack == "loss-threshold":
        scores = -o.losses(o.target, o.labels)
        t = _threshold(None if pop is None else -o.losses(pop, o.population_labels), fpr)
        return scores, None if t is None else scores > t
    if o.references is None:
        raise ValueError("needs reference models' outputs (reference_logits or reference_losses)")
    ref_in = np.zeros(o.references.shape[:2], dtype=bool) if o.reference_in is None else o.reference_in
    online = attack.endswith("online")
    if online and o.reference_in is None:
        raise ValueError("needs reference_in: which references trained on which records")
    if online and not (ref_in.any(axis=0).all() and (~ref_in).any(axis=0).all()):
        raise ValueError("needs every record IN for some reference and OUT for another (reference_in)")
    if not online and not (~ref_in).any(axis=0).all():
        raise ValueError("needs every record OUT for some reference (reference_in)")
    if attack.startswith("lira"):
        shadow_phi, phi = o.log_odds(o.references, o.labels), o.log_odds(o.target, o.labels)
        if online:
            scores = f.likelihood_ratio(shadow_phi, ref_in, phi, fixed_variance)
            return scores, scores > 0.0
        scores = f.one_sided_out(shadow_phi, ~ref_in, phi, fixed_variance)
        if pop is None or o.population_references is None:
            return scores, None
        pop_shadow = o.log_odds(o.population_references[f.population_references(ref_in)], o.population_labels)
        reference = f.one_sided_out(pop_shadow, np.ones(pop_shadow.shape, dtype=bool),
                                    o.log_odds(pop, o.population_labels), fixed_variance)
        return scores, scores > _threshold(reference, fpr)
    if pop is None or o.population_references is None:
        raise ValueError("needs population records (population_logits or population_losses, and the references' "
                         "outputs on them): RMIA compares each record with them")
    x_ratio, z_ratio = f.rmia_ratios(
        o.log_prob(o.target, o.labels), o.log_prob(o.references, o.labels), ref_in,
        o.log_prob(pop, o.population_labels), o.log_prob(o.population_references, o.population_labels),
        "online" if online else "offline", None)
    return f.rmia_scores(x_ratio, z_ratio, 1.0), x_ratio > _threshold(z_ratio, fpr)


@dataclass(frozen=True)
class OutputsEvaluation:
    """Each attack's ``Evaluation`` of the outputs (by attack name), and the attacks skipped with the reason."""

    evaluations: dict[str, Evaluation]
    skipped: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        return {"attacks": {a: e.as_dict() for a, e in self.evaluations.items()}, "skipped": self.skipped}

    def board(self) -> list[dict[str, Any]]:
        """One row per attack: every metric (None: n/r) with its interval, best AUC first."""
        rows = []
        for attack, ev in self.evaluations.items():
            row: dict[str, Any] = {"attack": attack}
            for m in ev.shown:
                row[m] = ev.metrics[m]
                if m in ev.intervals:
                    iv = ev.intervals[m]
                    row[f"{m}_low"], row[f"{m}_high"] = (None, None) if iv is None else iv
            rows.append(row)
        return sorted(rows, key=lambda r: -(r.get("auc") or 0.0))

    def table(self) -> str:
        lines = []
        for row in self.board():
            lines.append(f"== {row['attack']}")
            lines.append(self.evaluations[row["attack"]].table())
        lines.extend(f"skipped {a}: {why}" for a, why in self.skipped.items())
        return "\n".join(lines)

    def save(self, out: Path | str) -> list[Path]:
        """``board.json`` and ``board.csv`` (one row per attack) in ``out``, and each attack's metrics and ROC
        figure (``Evaluation.save``) in ``out/<attack>/``; return the paths written."""
        import pandas as pd

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        written = [out / "board.json", out / "board.csv"]
        written[0].write_text(json.dumps({"board": self.board(), "skipped": self.skipped}, indent=2) + "\n",
                              encoding="utf-8")
        written[1].write_text(pd.DataFrame.from_records(self.board()).to_csv(index=False), encoding="utf-8")
        for attack, ev in self.evaluations.items():
            written += ev.save(out / attack)
        return written


def evaluate_outputs(source: Path | str | Mapping[str, Any] | Outputs, *, fixed_variance: bool = False,
                     fpr: float = 0.1, resamples: int = 1000, seed: int = 0,
                     confidence: float = CONFIDENCE) -> OutputsEvaluation:
    """Every output-based attack (``ATTACKS``) on the outputs of ``source`` (an ``.npz`` path, or its arrays by
    field name), each evaluated as ``arena.evaluate`` evaluates scores."""
    if not 0 < fpr < 1:
        raise EvaluationInputError("fpr", f"must be in (0, 1), got {fpr!r}")
    o = source if isinstance(source, Outputs) else (
        read_outputs(source) if isinstance(source, (str, Path)) else check_outputs(source))
    evaluations, skipped = {}, {}
    for attack in ATTACKS:
        try:
            scores, decisions = attack_scores(o, attack, fixed_variance=fixed_variance, fpr=fpr)
        except ValueError as exc:
            skipped[attack] = str(exc)
            continue
        try:
            evaluations[attack] = evaluate(scores, o.is_member, decisions=decisions, resamples=resamples, seed=seed,
                                           confidence=confidence)
        except EvaluationInputError as exc:
            if exc.field != "scores":
                raise
            skipped[attack] = f"its scores cannot be evaluated ({exc})"
    return OutputsEvaluation(evaluations, skipped)
