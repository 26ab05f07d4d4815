"""The vulnerable-record protocol of the membership game (Aerni, Zhang & Tramèr, CCS 2024, §4).

Population averages say little about the records that leak most, and an evaluation on one target model cannot
resolve a TPR at 0.1 % FPR. So the challenger trains M target models per defense configuration (one batched call,
as shadow pools are trained) and inserts C canaries: records chosen to be vulnerable (mislabelled by default;
also out-of-distribution, or duplicated). The targets come in complementary pairs: for each pair the challenger
deals a random half of the base challenge records and a random half of the canaries to one target and the other
halves to its partner, so every canary is a member of exactly half the targets, and that assignment is the
secret. Every attack scores every (canary, target) pair, and the metric is the TPR at 0.1 % FPR over those pairs:
M·C/2 non-member observations (32 targets × 256 canaries: 4,096, which resolves 0.1 %).

Attacks whose threat model allows training shadow models use other targets as shadows: they were trained with the
defense itself on random halves of the same challenge, exactly what the attacker's own pool would be (so every
shadow attack is adaptive to the defense). The pairs are split into two halves; a target of one half is attacked
with the other half's targets as shadows, never with its partner (whose membership is the complement of its own).
The attacks of one matchup run in four processes, one after another: the even and the odd targets of each half,
so that no process ever holds two partners, or a target together with the membership of its own half.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from arena.contracts.metric import UNIT, Metric, tpr_key

if TYPE_CHECKING:
    import torch

CanaryKind = Literal["mislabelled", "ood", "duplicated", "vulnerable"]
VR_LEVELS = (0.01, 0.001, 0.0001)
"""The FPRs of the vulnerable-record TPRs (``vr_tpr@1%fpr``, ``vr_tpr@0.1%fpr``, ``vr_tpr@0.01%fpr``)."""
RANK_METRIC = "vr_tpr@0.1%fpr"
"""What the vulnerable-record protocol ranks by (Aerni et al.: TPR at 0.1 % FPR over the canaries)."""


def vr_key(level: float) -> str:
    """The vulnerable-record TPR at FPR ``level``: ``vr_tpr@0.1%fpr`` for 0.001."""
    return f"vr_tpr@{level * 100:g}%fpr"


VR_METRICS = (
    Metric("vr_auc", "membership", True, "vulnerable records: AUC over every (canary, target) pair", UNIT),
    *(Metric(vr_key(level), "membership", True, f"vulnerable records: TPR at {level:.2%} FPR over every (canary, "
             "target) pair; null when the non-member pairs cannot resolve it", UNIT) for level in VR_LEVELS),
)
"""The vulnerable-record metrics (the counts beside them, ``vr_members`` … ``vr_targets``, are sample sizes)."""


def _even(name: str, value: int) -> int:
    if value % 2:
        raise ValueError(f"{name} must be even (complementary halves), got {value}")
    return value


class ScreenSpec(BaseModel):
    """How ``kind: vulnerable`` canaries are chosen: a non-private screening pool of the track's model trained with
    this recipe, in complementary pairs on random halves of the base records and the candidates."""

    model_config = ConfigDict(extra="forbid")
    candidates: int = Field(default=0, strict=True, ge=0, le=1_000_000, description="dataset records screened "
                            "(0: four times the canaries); the most vulnerable ``count`` of them become canaries")
    models: int = Field(default=16, strict=True, ge=2, le=1024, description="screening models (even)")
    epochs: int = Field(default=30, strict=True, ge=1, le=10_000)
    lr: float = Field(default=0.1, gt=0.0, le=100.0, allow_inf_nan=False)
    batch_size: int = Field(default=32, strict=True, ge=1)
    momentum: float = Field(default=0.9, ge=0.0, lt=1.0)

    @field_validator("models")
    @classmethod
    def _models_even(cls, v: int) -> int:
        return _even("models", v)


class CanarySpec(BaseModel):
    """The canaries of the vulnerable-record protocol (``game.canaries``)."""

    model_config = ConfigDict(extra="forbid")
    count: int = Field(default=256, strict=True, ge=2, le=100_000,
                       description="canaries (even: each target trains on half of them)")
    kind: CanaryKind = Field(default="mislabelled", description="mislabelled: dataset records with a label drawn "
                             "uniformly among the other classes; ood: features drawn from a Gaussian with the "
                             "dataset's per-feature mean and standard deviation, random labels; duplicated: "
                             "dataset records with their own labels, inserted ``copies`` times; vulnerable: the "
                             "records a non-private screening pool finds most exposed (``screen``), own labels")
    copies: int = Field(default=1, strict=True, ge=1, le=100, description="times a member canary is in its "
                        "target's training set (``duplicated`` defaults to 4 when left at 1)")
    screen: ScreenSpec = Field(default_factory=ScreenSpec, description="the screening of ``kind: vulnerable``")

    @field_validator("count")
    @classmethod
    def _count_even(cls, v: int) -> int:
        return _even("count", v)

    @property
    def inserted(self) -> int:
        """Copies of each member canary in a training set."""
        return 4 if self.kind == "duplicated" and self.copies == 1 else self.copies

    def rows_needed(self) -> int:
        """Dataset records the canaries consume (``ood`` canaries are synthetic; ``vulnerable`` ones are chosen
        among the screened candidates)."""
        if self.kind == "vulnerable":
            return max(self.screen.candidates or 4 * self.count, self.count)
        return 0 if self.kind == "ood" else self.count


@dataclass(frozen=True)
class Canaries:
    """The C canary records as trained on: features [C, ...], labels [C], and each one's dataset row (−1 for a
    synthetic one)."""

    X: torch.Tensor
    y: torch.Tensor
    rows: np.ndarray


def make_canaries(spec: CanarySpec, dataset: Any, rows: np.ndarray, seed: int) -> Canaries:
    """The canaries of ``spec`` from the dataset records ``rows`` (unused for ``ood``), drawn with the
    challenger's ``seed``."""
    import torch  # here: the leaderboard reads this module's metrics without torch

    from arena.engine.seeds import derive_seed  # here: arena.engine imports torch

    rng = np.random.default_rng(derive_seed(seed, "canaries", spec.kind))
    c, k = spec.count, dataset.n_classes
    if spec.kind == "ood":
        X_all = np.asarray(dataset.X, dtype=np.float64)
        mean, std = X_all.mean(axis=0), X_all.std(axis=0)
        X = (mean + std * rng.standard_normal((c, *X_all.shape[1:]))).astype(np.asarray(dataset.X).dtype)
        y = rng.integers(0, k, c)
        return Canaries(torch.from_numpy(X), torch.from_numpy(y).long(), np.full(c, -1, dtype=np.int64))
    X = np.asarray(dataset.X[rows])
    y = np.asarray(dataset.y[rows]).astype(np.int64)
    if spec.kind == "mislabelled":  # a uniformly drawn other class: never the record's own
        y = (y + rng.integers(1, k, c)) % k
    return Canaries(torch.from_numpy(X), torch.from_numpy(y).long(), np.asarray(rows, dtype=np.int64))


def screen_risk(spec: ScreenSpec, arch: Any, X: torch.Tensor, y: torch.Tensor, seed: int) -> np.ndarray:
    """Each record's exposure [n] under a non-private screening pool of ``arch`` trained by the engine on random
    complementary halves of (X, y): LiRA's statistic φ = log(p_y / (1 − p_y)) per record, the gap between its mean
    over the models that trained on it and over those that did not, in units of their pooled standard deviation
    (Carlini et al. 2022's per-example difficulty). Higher: more exposed."""
    import torch

    from arena.contracts.release import Models
    from arena.engine.recipe import Recipe
    from arena.engine.seeds import derive_seed  # here: arena.engine imports torch
    from arena.engine.trainer import train
    from arena.games.membership.pools import plan_pool

    n = len(y)
    plan = plan_pool(n, n // 2, spec.models, derive_seed(seed, "canary-screen"))
    rows = torch.from_numpy(plan.rows)
    recipe = Recipe(epochs=spec.epochs, lr=spec.lr, momentum=spec.momentum, batch_size=spec.batch_size)
    state = train(arch, X[rows].float(), y[rows], recipe, torch.from_numpy(plan.init_seeds),
                  torch.from_numpy(plan.train_seeds))
    logits = Models(arch, state).logits(X.float()).double()  # [K, n, C]
    own = logits.gather(-1, y.expand(logits.shape[:2]).unsqueeze(-1)).squeeze(-1)
    others = logits.scatter(-1, y.expand(logits.shape[:2]).unsqueeze(-1), -math.inf).logsumexp(-1)
    phi = (own - others).numpy()
    inside = plan.challenge_in
    mean_in = np.where(inside, phi, 0).sum(0) / inside.sum(0)
    mean_out = np.where(~inside, phi, 0).sum(0) / (~inside).sum(0)
    var_in = np.where(inside, (phi - mean_in) ** 2, 0).sum(0) / np.maximum(inside.sum(0) - 1, 1)
    var_out = np.where(~inside, (phi - mean_out) ** 2, 0).sum(0) / np.maximum((~inside).sum(0) - 1, 1)
    return (mean_in - mean_out) / np.sqrt((var_in + var_out) / 2 + 1e-12)


@dataclass(frozen=True)
class TargetPlan:
    """Which challenge points each of the M targets trains on: ``is_in`` [M, N] (targets 2i and 2i+1 complementary
    on the base records and on the canaries), and every target's seeds."""

    is_in: np.ndarray
    init_seeds: np.ndarray
    train_seeds: np.ndarray


def plan_targets(base: int, canaries: int, targets: int, seed: int) -> TargetPlan:
    """Complementary random halves, pair by pair, of the ``base`` challenge records (the first ``base`` columns)
    and, independently, of the ``canaries`` (the last ``canaries`` columns)."""
    from arena.engine.seeds import derive_seed  # here: arena.engine imports torch
    if targets < 4 or targets % 4:
        raise ValueError(f"targets must be a multiple of 4 (two halves of complementary pairs), got {targets}")
    rng = np.random.default_rng(derive_seed(seed, "vulnerable-targets", targets))
    pairs = targets // 2
    is_in = np.zeros((targets, base + canaries), dtype=bool)
    for start, size in ((0, base), (base, canaries)):
        halves = rng.permuted(np.tile(np.arange(size), (pairs, 1)), axis=1) < size // 2
        is_in[0::2, start : start + size] = halves
        is_in[1::2, start : start + size] = ~halves
    init_seeds, train_seeds = rng.integers(0, 2**63 - 1, size=(2, targets), dtype=np.int64)
    return TargetPlan(is_in, init_seeds, train_seeds)


@dataclass(frozen=True)
class Group:
    """One attack process's share of a matchup: the targets it attacks and the targets it may use as shadows."""

    attacked: tuple[int, ...]
    shadows: slice


def groups(targets: int) -> list[Group]:
    """Four groups: the even and the odd targets of the first half of the pairs (shadows: the second half), then
    those of the second half (shadows: the first). No group holds two partners, or a shadow of its own half."""
    half = targets // 2
    first, second = slice(0, half), slice(half, targets)
    return [Group(tuple(range(start + parity, stop, 2)), other)
            for (start, stop), other in (((0, half), second), ((half, targets), first)) for parity in (0, 1)]


# --- metrics ---


def vulnerable_metrics(scores: np.ndarray, is_in: np.ndarray) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """The vulnerable-record metrics of the canary scores ``scores`` [M, C] with the secret ``is_in`` [M, C]: the AUC
    and the TPR at each FPR of ``VR_LEVELS`` over the M·C (canary, target) pairs, None where the non-member pairs
    cannot resolve the FPR; each TPR's operating point; and notes on what is unresolved."""
    from arena.games.membership.metrics import operating_points, score_metrics

    s, lab = np.asarray(scores, np.float64).reshape(-1), np.asarray(is_in, bool).reshape(-1)
    n_out, n_in = int((~lab).sum()), int(lab.sum())
    found = {k if k == "auc" else vr_key(level): v
             for level in VR_LEVELS for k, v in score_metrics(s[None], lab, [level]).items()
             if k == "auc" or k == tpr_key(level)}
    targets, canaries = np.asarray(is_in).shape
    metrics: dict[str, Any] = {"vr_auc": float(found["auc"][0]), "vr_members": n_in, "vr_nonmembers": n_out,
                               "vr_canaries": int(canaries), "vr_targets": int(targets)}
    points: dict[str, Any] = {}
    notes = []
    for level in VR_LEVELS:
        key = vr_key(level)
        if level * n_out < 1:
            metrics[key] = None
            notes.append(f"{key} not measurable: {n_out} non-member (canary, target) pairs resolve FPR only to "
                         f"{1 / n_out:.3%}")
        else:
            metrics[key] = float(found[key][0])
            points[key] = operating_points(s, lab, [level])[tpr_key(level)]
    return metrics, points, notes


VR_RESAMPLED = ("vr_auc", *(vr_key(level) for level in VR_LEVELS))
RESAMPLE_BATCH = 2_000_000
"""Bound on the scores of one batch of resamples (memory)."""


def vulnerable_draws(scores: np.ndarray, is_in: np.ndarray, *, resamples: int, seed: int) -> dict[str, np.ndarray]:
    """Bootstrap draws of the vulnerable-record metrics: the (canary, target) pairs are not independent (a canary
    the defense memorises leaks in every target that trained on it; a target may leak more than another), so each
    resample draws the canaries and, independently, the targets with replacement and takes every pair of the two
    (a two-way cluster bootstrap, conservative for either dependence): pair (t, c) counts as often as the product
    of t's and c's multiplicities (``metrics.weighted_rates``)."""
    from arena.games.membership.metrics import multiplicities, weighted_rates

    S, L = np.asarray(scores, np.float64), np.asarray(is_in, bool)
    M, C = S.shape
    rng = np.random.default_rng(seed)
    chunk = max(1, min(resamples, RESAMPLE_BATCH // max(1, M * C)))
    out: dict[str, list[np.ndarray]] = {}
    done = 0
    while done < resamples:
        b = min(chunk, resamples - done)
        W = multiplicities(rng, b, M)[:, :, None] * multiplicities(rng, b, C)[:, None, :]
        found = weighted_rates(S.reshape(-1), L.reshape(-1), W.reshape(b, -1), VR_LEVELS)
        for key in VR_RESAMPLED:
            out.setdefault(key, []).append(found["auc" if key == "vr_auc" else tpr_key(fpr_level_of(key))])
        done += b
    return {k: np.concatenate(v) for k, v in out.items()}


def fpr_level_of(key: str) -> float:
    """The FPR of a vulnerable-record TPR key (``vr_tpr@0.1%fpr`` → 0.001)."""
    return next(level for level in VR_LEVELS if vr_key(level) == key)


def resample(arrays: Mapping[str, Any], metrics: Sequence[str], *, resamples: int,
             seed: int) -> dict[str, np.ndarray] | None:
    """The membership game's ``resample``: the population metrics by the per-point bootstrap of
    ``arena.games.membership.metrics.resample`` (over the base records, pooled over targets) and, under the
    vulnerable-record protocol (arrays ``canary`` and ``target``), the vulnerable-record metrics by
    ``vulnerable_draws`` over the canary pairs."""
    from arena.games.membership import metrics as population

    if arrays is None or "canary" not in arrays or "target" not in arrays:
        return population.resample(arrays, metrics, resamples=resamples, seed=seed)
    canary = np.asarray(arrays["canary"]).astype(bool)
    targets = int(np.asarray(arrays["target"]).max()) + 1
    base = {k: np.asarray(v)[~canary] for k, v in arrays.items() if k in ("scores", "is_member")}
    draws = dict(population.resample(base, [m for m in metrics if not m.startswith("vr_")], resamples=resamples,
                                     seed=seed) or {})
    wanted = [m for m in metrics if m in VR_RESAMPLED]
    if wanted:
        S = np.asarray(arrays["scores"], np.float64)[canary].reshape(targets, -1)
        L = np.asarray(arrays["is_member"]).astype(bool)[canary].reshape(targets, -1)
        found = vulnerable_draws(S, L, resamples=resamples, seed=seed + 1)
        draws.update({k: found[k] for k in wanted})
    return draws
