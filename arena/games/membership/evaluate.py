"""Bring your own scores: every membership metric, its bootstrap interval and the ROC figure of scores an attack
made elsewhere (``arena.evaluate``, ``arena evaluate FILE``), like TF Privacy's ``AttackInputData``.

The same computations as a matchup of the membership game (``arena.games.membership.metrics``): AUC, advantage,
TPR at 10 %, 1 % and 0.1 % FPR (``n/r``, never a number, where the non-members cannot resolve the FPR: fewer than
1/FPR of them) and, given hard ``decisions``, the balanced accuracy; 95 % percentile intervals from stratified
bootstrap resamples of the points (members and non-members each drawn with replacement, so every resample keeps
the FPR resolution). Scores are higher-means-member: pass ``-loss`` for losses.

Input files (``read_scores``): ``.npz`` arrays or ``.csv`` columns named ``scores`` and ``is_member`` (0/1 or
true/false), optionally ``decisions``. Every problem is an ``EvaluationInputError`` naming the field.
"""

from __future__ import annotations

import csv
import io
import json
import math
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from sklearn.metrics import roc_curve

from arena.contracts.metric import FPR_LEVELS, UNIT, tpr_key
from arena.games.membership.metrics import bootstrap_metrics, membership_metrics

NOT_RESOLVABLE = "n/r"
CONFIDENCE = 0.95
FIELDS = ("scores", "is_member", "decisions")
"""The arrays or columns a scores file may hold (``decisions`` optional)."""
MAX_FILE_BYTES = 2 * 1024**3
MAX_ARRAY_BYTES = 1024**3
"""Uncompressed bytes the arrays of an ``.npz`` scores file may hold together (checked before decompressing)."""


class EvaluationInputError(ValueError):
    """Input that cannot be evaluated; ``field`` names what is wrong (``scores``, ``is_member``, ``decisions``,
    or ``(file)`` for the file itself)."""

    def __init__(self, field_name: str, message: str) -> None:
        self.field = field_name
        super().__init__(f"{field_name}: {_one_line(message)}")


def _one_line(text: str) -> str:
    """``text`` on one line, its control characters escaped: a message about a file names what is in the file."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:2000])


@dataclass(frozen=True)
class Evaluation:
    """The membership metrics of one set of scores: ``metrics`` (None where the sample cannot resolve it),
    ``intervals`` (metric → (low, high) at ``confidence``; None where there is none), ``notes`` (what cannot be
    resolved, and why), and the inputs."""

    metrics: dict[str, float | int | None]
    intervals: dict[str, tuple[float, float] | None]
    notes: list[str]
    scores: np.ndarray = field(repr=False)
    is_member: np.ndarray = field(repr=False)
    resamples: int = 1000
    confidence: float = CONFIDENCE

    @property
    def n_members(self) -> int:
        return int(self.metrics["n_members"])  # type: ignore[arg-type]

    @property
    def n_nonmembers(self) -> int:
        return int(self.metrics["n_nonmembers"])  # type: ignore[arg-type]

    def value(self, metric: str) -> str:
        """A metric as the arena prints it: three digits, or ``n/r``."""
        v = self.metrics[metric]
        return NOT_RESOLVABLE if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))

    def frame(self) -> pd.DataFrame:
        """One row per metric: ``value`` (NaN for n/r), ``low``, ``high`` and ``resolvable``."""
        records = []
        for name in self.shown:
            v, iv = self.metrics[name], self.intervals.get(name)
            records.append({"metric": name, "value": math.nan if v is None else float(v),
                            "low": math.nan if iv is None else iv[0], "high": math.nan if iv is None else iv[1],
                            "resolvable": v is not None})
        return pd.DataFrame.from_records(records).set_index("metric")

    @property
    def shown(self) -> list[str]:
        """The metrics (the counts last)."""
        return [m for m in self.metrics if not m.startswith("n_")] + ["n_members", "n_nonmembers"]

    def as_dict(self) -> dict[str, Any]:
        """JSON form: ``n/r`` for what the sample cannot resolve, ``null`` intervals where there are none."""
        return {"metrics": {m: NOT_RESOLVABLE if self.metrics[m] is None else self.metrics[m] for m in self.shown},
                "intervals": {m: None if iv is None else list(iv) for m, iv in self.intervals.items()},
                "confidence": self.confidence, "resamples": self.resamples,
                "interval_method": self.interval_method, "notes": self.notes}

    @property
    def interval_method(self) -> str:
        return (f"{self.confidence:.0%} percentile bootstrap over the points ({self.resamples} stratified resamples: "
                "members and non-members each drawn with replacement)")

    def table(self) -> str:
        """The metrics with their intervals, for a terminal."""
        lines = [f"{self.n_members} members, {self.n_nonmembers} non-members; intervals: {self.interval_method}"]
        for m in self.shown:
            if m.startswith("n_"):
                continue
            iv = self.intervals.get(m)
            interval = f"[{iv[0]:.3f}, {iv[1]:.3f}]" if iv is not None else ""
            lines.append(f"  {m:20} {self.value(m):>7}  {interval}")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)

    def figure(self) -> Figure:
        """The log-log ROC curve, floored at 1/n members, with each resolvable TPR at FPR and its interval marked;
        legend inside its own axes."""
        fpr, tpr, _ = roc_curve(self.is_member, self.scores)
        smallest, floor = 1.0 / self.n_nonmembers, 1.0 / self.n_members
        fig = Figure(figsize=(5.2, 4.6))
        ax = fig.subplots()
        ax.step(np.maximum(fpr, smallest), np.maximum(tpr, floor), where="post", color="C0",
                label=f"ROC: AUC {self.value('auc')}")
        grid = np.logspace(math.log10(smallest), 0, 50)
        ax.plot(grid, grid, color="grey", linestyle=":", label="chance")
        for k, level in enumerate(FPR_LEVELS):
            key, iv = tpr_key(level), self.intervals.get(tpr_key(level))
            if self.metrics.get(key) is None:
                continue
            v = max(float(self.metrics[key]), floor)  # type: ignore[arg-type]
            err = None if iv is None else [[v - max(iv[0], floor)], [max(iv[1], floor) - v]]
            ax.errorbar([level], [v], yerr=err, fmt="o", color=f"C{k + 1}", capsize=3,
                        label=f"TPR@{level:.1%} FPR {self.value(key)}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(smallest, 1)
        ax.set_ylim(min(floor, smallest) * 0.9, 1.05)
        ax.set_xlabel(f"false-positive rate (resolution {smallest:.2g})")
        ax.set_ylabel(f"true-positive rate (floor 1/n = {floor:.2g})")
        ax.set_title(f"{self.n_members} members, {self.n_nonmembers} non-members", fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        return fig

    def save(self, out: Path | str) -> list[Path]:
        """Write ``metrics.json``, ``metrics.csv`` and the ROC figure (``roc.png``, ``roc.svg``, ``roc.pdf``, TrueType
        fonts) into ``out`` (created); return the paths written."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        written = [out / "metrics.json", out / "metrics.csv"]
        written[0].write_text(json.dumps(self.as_dict(), indent=2) + "\n", encoding="utf-8")
        written[1].write_text(self.frame().to_csv(), encoding="utf-8")
        fig = self.figure()
        FigureCanvasAgg(fig)
        with rc_context({"pdf.fonttype": 42, "ps.fonttype": 42, "svg.fonttype": "none"}):
            for suffix in ("png", "svg", "pdf"):
                path = out / f"roc.{suffix}"
                fig.savefig(path, dpi=150, metadata={"Date": None} if suffix == "pdf" else None)
                written.append(path)
        return written


def _complex(values: Any) -> bool:
    try:
        kind = np.asarray(values).dtype.kind
    except (TypeError, ValueError):
        return False
    return kind == "c" or (kind == "O" and any(isinstance(v, complex) for v in np.asarray(values).reshape(-1)))


def _binary(values: np.ndarray, field_name: str) -> np.ndarray:
    """0/1 or true/false values as booleans; ``EvaluationInputError`` naming the first other value."""
    arr = np.asarray(values)
    if arr.dtype == bool:
        return arr
    if arr.dtype.kind in "iuf":
        bad = ~np.isin(arr, (0, 1))
        if bad.any():
            i = int(np.argmax(bad))
            raise EvaluationInputError(field_name, f"must be 0/1 or true/false; value {arr[i]!r} at row {i + 1}")
        return arr.astype(bool)
    raise EvaluationInputError(field_name, f"must be 0/1 or true/false, not {arr.dtype} values")


def check(scores: Any, is_member: Any, decisions: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The inputs as arrays (float64 scores, boolean membership and decisions), or ``EvaluationInputError``: not one
    value per point, not numbers (complex ones included: never their real part alone), NaN or infinite scores,
    non-binary labels, lengths that differ, no member or no non-member."""
    if _complex(scores):
        raise EvaluationInputError("scores", "complex numbers: real scores expected")
    try:
        s = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise EvaluationInputError("scores", f"not numbers ({exc})") from None
    if s.ndim != 1:
        raise EvaluationInputError("scores", f"shape {s.shape}: one score per point expected (a 1-D array)")
    if len(s) == 0:
        raise EvaluationInputError("scores", "empty")
    bad = ~np.isfinite(s)
    if bad.any():
        raise EvaluationInputError("scores", f"{int(bad.sum())} value(s) NaN or infinite (first at row "
                                             f"{int(np.argmax(bad)) + 1})")
    arrays = {"is_member": is_member, "decisions": decisions}
    out: dict[str, np.ndarray] = {}
    for name, value in arrays.items():
        if value is None:
            continue
        arr = np.asarray(value)
        if arr.ndim != 1:
            raise EvaluationInputError(name, f"shape {arr.shape}: one value per point expected (a 1-D array)")
        if len(arr) != len(s):
            raise EvaluationInputError(name, f"{len(arr)} values, but scores has {len(s)}")
        out[name] = _binary(arr, name)
    if "is_member" not in out:
        raise EvaluationInputError("is_member", "missing")
    lab = out["is_member"]
    if lab.all() or not lab.any():
        raise EvaluationInputError("is_member", f"needs members and non-members, got {int(lab.sum())} and "
                                                f"{int((~lab).sum())}")
    return s, lab, out.get("decisions")


def evaluate(scores: Any, is_member: Any, *, decisions: Any = None, resamples: int = 1000, seed: int = 0,
             confidence: float = CONFIDENCE) -> Evaluation:
    """Every membership metric of ``scores`` (higher means member) against ``is_member`` (0/1), with its bootstrap
    interval; ``decisions`` (0/1, the attack's own hard guesses) adds the balanced accuracy. ``resamples``
    stratified bootstrap draws, seeded by ``seed``. ``EvaluationInputError`` (a ``ValueError``) names the field of
    any bad input."""
    if not (isinstance(resamples, int) and resamples >= 0):
        raise EvaluationInputError("resamples", f"must be a whole number ≥ 0, got {resamples!r}")
    if not 0 < confidence < 1:
        raise EvaluationInputError("confidence", f"must be in (0, 1), got {confidence!r}")
    s, lab, dec = check(scores, is_member, decisions)
    metrics, notes = membership_metrics(s, lab, dec if dec is not None else np.zeros(len(s), dtype=bool))
    if dec is None:
        metrics.pop("balanced_accuracy")
    order = ["auc", "advantage", *(tpr_key(f) for f in sorted(FPR_LEVELS, reverse=True)),
             *(["balanced_accuracy"] if dec is not None else []), "n_members", "n_nonmembers"]
    metrics = {m: metrics[m] for m in order}
    wanted = [m for m in order if m not in ("balanced_accuracy", "n_members", "n_nonmembers")
              and metrics[m] is not None]
    draws = bootstrap_metrics(s, lab, wanted, resamples=resamples, seed=seed) if resamples and wanted else {}
    tail = (1 - confidence) / 2
    intervals: dict[str, tuple[float, float] | None] = {}
    for m in order[:-2]:
        if m in draws:
            low, high = np.quantile(draws[m], [tail, 1 - tail])
            intervals[m] = (max(float(low), UNIT[0]), min(float(high), UNIT[1]))
        else:
            intervals[m] = None
    if dec is not None:
        notes.append("balanced_accuracy has no interval: the attack's decisions are not resampled")
    return Evaluation(metrics, intervals, notes, s, lab, resamples, confidence)


def read_npz(path: Path, fields: tuple[str, ...] = FIELDS, required: tuple[str, ...] = ("scores", "is_member"),
         what: str = "a scores file") -> dict[str, np.ndarray]:
    """The fields of an ``.npz`` archive, read without trusting it: each member's declared uncompressed size is
    checked against ``MAX_ARRAY_BYTES`` before any byte is decompressed, the decompression is capped at the
    declared size (``zipfile`` stops there and checks the CRC), each ``.npy`` header must describe exactly the
    bytes that follow, and object arrays (pickles) are refused. Any failure of the archive or of NumPy's header
    parser is ``EvaluationInputError``."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = {info.filename: info for info in archive.infolist()}
            names = [n.removesuffix(".npy") for n in members]
            found: dict[str, np.ndarray] = {}
            total = 0
            for name in fields:
                info = members.get(f"{name}.npy") or members.get(name)
                if info is None:
                    continue
                total += info.file_size
                if total > MAX_ARRAY_BYTES:
                    raise EvaluationInputError(name, f"declares {info.file_size} bytes uncompressed; the arrays of "
                                                     f"{what} may hold {MAX_ARRAY_BYTES} bytes in all")
                with archive.open(info) as member:
                    raw = member.read(info.file_size + 1)
                if len(raw) != info.file_size:
                    raise EvaluationInputError(name, f"holds {len(raw)} bytes, its entry declares {info.file_size}")
                found[name] = _npy(name, raw)
    except EvaluationInputError:
        raise
    except Exception as exc:  # noqa: BLE001 - zipfile, zlib, NumPy's header parser (tokenize, ...): anything
        raise EvaluationInputError("(file)", f"not a readable .npz archive ({type(exc).__name__}: {exc})") from None
    for name in required:
        if name not in found:
            raise EvaluationInputError(name, f"missing (the archive holds: {', '.join(names) or 'nothing'})")
    return found


def _npy(name: str, raw: bytes) -> np.ndarray:
    """One ``.npy`` member's array, its header checked against its size before anything is allocated."""
    stream = io.BytesIO(raw)
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
    else:
        raise EvaluationInputError(name, f".npy format version {version[0]}.{version[1]}: 1.0 or 2.0 expected")
    if dtype.hasobject:
        raise EvaluationInputError(name, "cannot be read without unpickling (an object array)")
    count = math.prod(shape)
    if count * dtype.itemsize != len(raw) - stream.tell():
        raise EvaluationInputError(name, f"its header declares {count} values of {dtype.itemsize} bytes, but "
                                         f"{len(raw) - stream.tell()} bytes follow")
    array = np.frombuffer(raw, dtype=dtype, count=count, offset=stream.tell())
    return array.reshape(shape, order="F" if fortran else "C").copy()


def _csv(path: Path) -> dict[str, np.ndarray]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise EvaluationInputError("(file)", f"not UTF-8 text (byte {exc.start})") from None
    reader = csv.reader(io.StringIO(text))
    try:
        return _csv_columns(reader)
    except csv.Error as exc:  # a field past csv's limit, a quote left open: one line, no traceback
        raise EvaluationInputError("(file)", f"line {reader.line_num}: not a readable .csv row ({exc})") from None


def _csv_columns(reader: Any) -> dict[str, np.ndarray]:
    header = next(reader, None)
    if not header:
        raise EvaluationInputError("(file)", "empty: a header line naming the columns scores and is_member expected")
    header = [h.strip() for h in header]
    for name in ("scores", "is_member"):
        if name not in header:
            raise EvaluationInputError(name, f"missing column (the header names: {', '.join(header)})")
    columns = {name: header.index(name) for name in FIELDS if name in header}
    values: dict[str, list[Any]] = {name: [] for name in columns}
    for line, record in enumerate(reader, start=2):
        if not any(c.strip() for c in record):
            continue
        if len(record) != len(header):
            raise EvaluationInputError("(file)", f"line {line}: {len(record)} fields, the header has {len(header)}")
        for name, i in columns.items():
            cell = record[i].strip()
            if name == "scores":
                try:
                    number = float(cell)
                except ValueError:
                    raise EvaluationInputError(name, f"line {line}: {cell!r} is not a number") from None
                if not math.isfinite(number):
                    raise EvaluationInputError(name, f"line {line}: {cell!r} is NaN or infinite")
                values[name].append(number)
            else:
                flag = {"0": 0, "1": 1, "false": 0, "true": 1, "0.0": 0, "1.0": 1}.get(cell.lower())
                if flag is None:
                    raise EvaluationInputError(name, f"line {line}: {cell!r} is not 0/1 or true/false")
                values[name].append(flag)
    return {name: np.asarray(v, dtype=np.float64 if name == "scores" else np.int8) for name, v in values.items()}


def checked_file(path: Path | str, suffixes: tuple[str, ...]) -> Path:
    """``path`` when it is a readable regular file of at most ``MAX_FILE_BYTES`` with one of ``suffixes``, else
    ``EvaluationInputError`` for ``(file)``."""
    path = Path(path)
    try:
        info = path.stat()
    except OSError as exc:
        raise EvaluationInputError("(file)", f"cannot read: {exc.strerror or exc}") from None
    if not path.is_file():
        raise EvaluationInputError("(file)", "not a file")
    if info.st_size > MAX_FILE_BYTES:
        raise EvaluationInputError("(file)", f"{info.st_size} bytes, more than {MAX_FILE_BYTES}")
    suffix = path.suffix.lower()
    if suffix not in suffixes:
        raise EvaluationInputError("(file)", f"a {suffix or 'suffix-less'} file: {' or '.join(suffixes)} expected")
    return path


def read_scores(path: Path | str) -> dict[str, np.ndarray]:
    """``scores``, ``is_member`` (and ``decisions`` where present) of a ``.npz`` or ``.csv`` file, checked
    (``check``); ``EvaluationInputError`` naming the field (``(file)`` for the file itself)."""
    path = checked_file(path, (".npz", ".csv"))
    suffix = path.suffix.lower()
    try:
        found = read_npz(path) if suffix == ".npz" else _csv(path)
    except PermissionError as exc:
        raise EvaluationInputError("(file)", f"cannot read: {exc.strerror or exc}") from None
    check(found["scores"], found["is_member"], found.get("decisions"))
    return found


def evaluate_file(path: Path | str, **options: Any) -> Evaluation:
    """``evaluate`` of a scores file (``read_scores``)."""
    found: Mapping[str, np.ndarray] = read_scores(path)
    return evaluate(found["scores"], found["is_member"], decisions=found.get("decisions"), **options)
