"""Synthetic run directories of any size for the post-processing benchmarks and the memory test: rows of the current
schema (``arena.pipeline.row``) for the membership game, over several tracks, defense configurations (non-private,
DP-SGD and output perturbation claiming (ε, δ), RelaxLoss), attack configurations and seeds, each matchup with its
saved arrays (scores, membership, record, label) and the bootstrap draws a scored matchup saves, authenticated with
the run's secret as ``arena run`` writes them (and ``matchups.json``, the marker).

The numbers are the game's own: each matchup's scores are drawn from one of ``PROTOTYPES`` score vectors (members
shifted by a signal that grows with the defense's leakage and the attack's strength), and its metrics, operating
points and draws are computed by the membership game's functions from them (once per prototype: a 10,000-row
directory is written in seconds, not the hours its bootstrap draws would take one by one). Rows that fail or
skip are sprinkled in, as real runs have them.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

PROTOTYPES = 32
POINTS = 400  # challenge points a matchup: half members (the digits scenarios' ``members: 200``)
CLASSES = 10
SECRET = "5e" * 32
ATTACKS = ("threshold-mia", "shadow-mia", "lira", "rmia")


@dataclass(frozen=True)
class Shape:
    """How a generated run is laid out: ``tracks`` × ``defenses`` × ``attacks`` × ``seeds`` matchups (the last track
    cut short to reach the asked-for number of rows)."""

    tracks: int
    defenses: int
    attacks: int
    seeds: int

    @classmethod
    def of(cls, rows: int, tracks: int = 4, seeds: int = 3) -> Shape:
        """A square-ish grid per track: cells grow as the rows do (1,000 rows: 9 × 10 cells a track; 10,000:
        29 × 29), as a benchmark that grows does."""
        cells = math.ceil(rows / (tracks * seeds))
        defenses = max(1, math.isqrt(cells))
        return cls(tracks, defenses, math.ceil(cells / defenses), seeds)


def _key(*parts: object) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:24]


def _defense(i: int) -> dict[str, Any]:
    """The i-th defense configuration: non-private first, then DP-SGD, output perturbation and RelaxLoss in turn
    over growing parameters."""
    if i == 0:
        return {"defense": "nonprivate", "defense_label": "nonprivate", "defense_params": {}, "epsilon": None,
                "delta": None, "leak": 1.5}
    kind, step = (i - 1) % 3, (i - 1) // 3
    if kind == 2:
        alpha = round(0.25 * (step + 1), 2)
        return {"defense": "relaxloss", "defense_label": f"relaxloss(alpha={alpha})",
                "defense_params": {"alpha": alpha}, "epsilon": None, "delta": None, "leak": 1.2 / (1 + alpha)}
    eps = round(2 ** ((0.7 * step) % 4 - 1), 3)  # distinct targets in [0.5, 8): claims the audit can test
    name = "dpsgd" if kind == 0 else "output-perturbation"
    delta = 1e-5 if kind == 0 else 0.0
    return {"defense": name, "defense_label": f"{name}(eps={eps})", "defense_params": {"epsilons": [eps]},
            "epsilon": eps, "delta": delta, "leak": min(1.4, 0.08 * eps),
            "claim": {"epsilon": eps, "delta": delta, "accountant": "rdp" if kind == 0 else "Laplace mechanism",
                      "target_epsilon": eps, "noise_multiplier": None, "sample_rate": None, "steps": None,
                      "mechanism": "DP-SGD, Poisson-subsampled Gaussian, add/remove" if kind == 0 else
                      "output perturbation, add/remove"}}


def _attack(j: int) -> dict[str, Any]:
    name = ATTACKS[j % len(ATTACKS)]
    variant = j // len(ATTACKS)
    params = {} if variant == 0 else {"shadows": 2 ** variant}
    label = name if variant == 0 else f"{name}(shadows={2 ** variant})"
    return {"attack": name, "attack_label": label, "attack_params": params, "strength": 0.6 + 0.4 * (j % 7) / 6}


@dataclass
class Prototype:
    """One score vector with what the game computes from it: metrics, notes, operating points, bootstrap draws."""

    arrays: dict[str, np.ndarray]
    metrics: dict[str, Any]
    notes: list[str]
    points: dict[str, dict[str, Any]]
    draws: dict[str, np.ndarray]


def prototypes(count: int = PROTOTYPES, points: int = POINTS) -> list[Prototype]:
    """``count`` matchups' arrays from no signal to a strong one, each scored by the membership game."""
    from arena.engine.seeds import RESAMPLES
    from arena.games.membership.metrics import membership_scores
    from arena.games.membership.vulnerable import resample

    out = []
    for p in range(count):
        rng = np.random.default_rng(p)
        member = np.arange(points) < points // 2
        signal = 2.0 * p / max(1, count - 1)
        scores = rng.normal(size=points) + signal * member
        arrays = {"scores": scores.astype(np.float32), "is_member": member.astype(np.int64),
                  "record": rng.permutation(1797)[:points].astype(np.int64),
                  "label": rng.integers(0, CLASSES, points).astype(np.int64)}
        metrics, notes, found = membership_scores(scores, member, scores > np.median(scores))
        draws = resample(arrays, list(metrics), resamples=RESAMPLES, seed=p) or {}
        out.append(Prototype(arrays, metrics, notes, found, draws))
    return out


def _columns() -> dict[str, Any]:
    """How to read the membership game's rows, as ``arena run`` records them."""
    from arena.pipeline.execute import game_columns

    return game_columns("membership")


def _row(track: str, d: dict[str, Any], a: dict[str, Any], seed: int, proto: Prototype, status: str,
         columns: dict[str, Any]) -> dict[str, Any]:
    from arena._version import __version__
    from arena.pipeline.row import SCHEMA_VERSION

    release = _key(track, d["defense_label"], seed)
    ok = status == "ok"
    return {
        "schema": SCHEMA_VERSION, "key": _key(release, a["attack_label"]), "release_key": release,
        "scenario": "synthetic", "track": track, "game": "membership",
        "defense": d["defense"], "defense_label": d["defense_label"],
        "defense_params": {**d["defense_params"], "training": {"epochs": 5, "batch_size": 64, "lr": 0.1}},
        "epsilon": d["epsilon"], "delta": d["delta"], "attack": a["attack"], "attack_label": a["attack_label"],
        "attack_params": a["attack_params"], "threat_model": ["labels", "population"], "seed": seed,
        "definition": {"track": _key(track), "defense": _key(d["defense_label"]), "attack": _key(a["attack_label"])},
        "status": status, "utility": 0.97 - 0.1 * (1 - min(1.0, d["leak"])) if status != "skipped" else None,
        "seconds": 1.5 + seed * 0.1,
        "error": None if ok else ("skipped: the attack needs logits" if status == "skipped" else "RuntimeError: boom"),
        "traceback": None if status != "failed" else "Traceback (most recent call last):\nRuntimeError: boom",
        "metrics": dict(proto.metrics) if ok else {}, "operating_points": dict(proto.points) if ok else {},
        "notes": list(proto.notes) if ok else [], "claim": d.get("claim") if status != "skipped" else None,
        "versions": {"arena": __version__, "torch": "2.0", "python": "3.11",
                     "game": f"privacy-arena {__version__} / membership v1",
                     "dataset": f"privacy-arena {__version__} / digits v1",
                     "model": f"privacy-arena {__version__} / logreg v1",
                     "defense": f"privacy-arena {__version__} / {d['defense']} v1",
                     "attack": f"privacy-arena {__version__} / {a['attack']} v1"}, **columns,
    }


class _Entries:
    """One prototype's cache entry (its arrays or its draws) serialised once, as ``TensorCache.put`` writes it
    (safetensors, the SHA-256 of its tensors, an HMAC binding it to its kind and key with the run's secret), then
    written under each matchup's key with that key's HMAC: 10,000 entries cost 10,000 file writes, not 10,000
    serialisations and hashes of the same tensors."""

    PLACEHOLDER = "0" * 64

    def __init__(self, store: Any, kind: str, arrays: dict[str, np.ndarray]) -> None:
        from safetensors.numpy import save

        from arena.pipeline.tensorcache import DIGEST, arrays_sha256

        self.cache, self.kind, self.secret = store.artifacts, kind, store.secret()
        self.digest = arrays_sha256(arrays)
        self.data = save({k: np.ascontiguousarray(v) for k, v in arrays.items()},
                         metadata={DIGEST: self.digest, "mac": self.PLACEHOLDER})
        assert self.data.count(self.PLACEHOLDER.encode()) == 1

    def write(self, key: str) -> None:
        from arena.pipeline.tensorcache import entry_mac

        mac = entry_mac(self.secret, key, self.kind, self.digest).encode()  # as RunStore files them: key, then kind
        path = self.cache.path(key, self.kind)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.data.replace(self.PLACEHOLDER.encode(), mac))


def make_run_dir(root: Path | str, rows: int, *, tracks: int = 4, seeds: int = 3, arrays: bool = True,
                 draws: bool = True, failed_every: int = 97) -> Path:
    """Write a run directory of ``rows`` matchups under ``root`` (which must not hold one): ``Shape.of(rows)``,
    every ``failed_every``-th matchup failed or skipped; ``arrays`` and ``draws``: save each ok matchup's arrays
    and bootstrap draws as a scored matchup does (entries the store reads back and verifies). The rows are written
    in one go, each line as ``RunStore.append_result`` writes it. Returns ``root``."""
    import json
    import os

    from arena.pipeline.store import SECRET_ENV, RunStore

    root = Path(root)
    shape = Shape.of(rows, tracks, seeds)
    protos = prototypes()
    columns = _columns()
    previous = os.environ.get(SECRET_ENV)
    os.environ[SECRET_ENV] = SECRET
    try:
        store = RunStore(root)
        store.mark()
        saved = [(_Entries(store, "arrays", p.arrays), _Entries(store, "bootstrap", p.draws)) for p in protos]
        written: dict[str, dict[str, Any]] = {}
        lines = []
        for n in range(rows):
            t, rest = divmod(n, shape.defenses * shape.attacks * shape.seeds)
            i, rest = divmod(rest, shape.attacks * shape.seeds)
            j, seed = divmod(rest, shape.seeds)
            d, a = _defense(i), _attack(j)
            status = "ok" if (n + 1) % failed_every else ("failed" if (n + 1) % 2 else "skipped")
            level = d["leak"] * a["strength"] / 1.5 + 0.05 * seed
            p = min(len(protos) - 1, max(0, round(level * (len(protos) - 1))))
            row = _row(f"track-{t}", d, a, seed, protos[p], status, columns)
            if status == "ok" and arrays:
                saved[p][0].write(row["key"])
            if status == "ok" and draws:
                saved[p][1].write(row["key"])
            lines.append(json.dumps(row, sort_keys=True, default=str) + "\n")
            written[row["key"]] = {"defense_label": row["defense_label"], "attack_label": row["attack_label"]}
        store.results_path.write_text("".join(lines), encoding="utf-8")
        store.results_path.chmod(0o600)
        store.set_matchups(written)
    finally:
        if previous is None:
            os.environ.pop(SECRET_ENV, None)
        else:
            os.environ[SECRET_ENV] = previous
    return root
