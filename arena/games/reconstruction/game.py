"""The reconstruction game (Balle, Cherubin & Hayes 2022): an informed adversary who knows D⁻ rebuilds the target.

Per seed the dataset is split into a fixed set D⁻, a target pool, the adversary's shadow targets (its prior) and
a test set, all disjoint. Released model k is trained on D⁻ ∪ {z_k}; all of them come from one batched call of
the training procedure. The adversary gets the released parameters, D⁻, the procedure (and the initialisation
seed when it is known) and the shadow targets, never a target. Scoring is per target: the MSE between the
reconstruction and z, against the nearest-neighbour oracle, the closest point the adversary already holds
(D⁻ ∪ shadow targets); a target is reconstructed when its MSE is strictly below its oracle's. Metrics: mse_mean,
mse_median, oracle_mse_mean, success_rate, label_accuracy (null when the attack returns no labels), n_targets,
and kappa, the success a guess that ignores the model reaches (for the DP audit's bounds, e^ε κ + δ and
Hayes et al.'s), with kappa_exact saying whether it is exact or estimated.

Two priors (the spec's ``prior``):

* continuous (Balle et al.): targets are fresh records from the data distribution; success is a reconstruction
  strictly closer than the target's oracle. κ = sup over guesses g of P_z[MSE(g, z) < oracle(z)] has no closed
  form; ``kappa_estimate`` searches guesses (targets, the adversary's pool, midpoints of neighbouring targets,
  and mean-shift steps from those towards denser regions) with the targets as the prior sample. It is a lower
  estimate of the supremum (a better guess may exist), and it cannot go below 1/n_targets.
* discrete (Hayes, Mahloujifar & Balle 2023): n candidates, distinct records disjoint from D⁻, are drawn per
  seed and shown to the attack (capability ``prior``); each released model's target is drawn uniformly from
  them, and the drawn index is the secret. Success means the candidate nearest (MSE) to the reconstruction is
  the target, so every guess that ignores the model succeeds with probability exactly κ = 1/n.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, cast

import numpy as np
import torch
from pydantic import ConfigDict, Field, PositiveInt

from arena.contracts.attack import Attack
from arena.contracts.dataset import Dataset
from arena.contracts.game import Game, Outcome
from arena.contracts.metric import NON_NEGATIVE, UNIT, Metric
from arena.contracts.release import Models, Release
from arena.contracts.spec import GameSpec
from arena.contracts.view import Grant, View
from arena.engine.seeds import derive_seed, permutation
from arena.games.reconstruction.grids import GRID_FILE, save_grid
from arena.games.reconstruction.guess import ReconstructionGuess
from arena.pipeline.procedure import TrainingProcedure


class ReconstructionGameSpec(GameSpec):
    """Informed adversary: a fixed set D⁻, targets drawn from a pool disjoint from D⁻ and the shadow targets."""

    model_config = ConfigDict(extra="forbid")
    name: Literal["reconstruction"]
    fixed: PositiveInt = 100
    targets: PositiveInt = 50
    shadow_targets: PositiveInt = 500
    test: PositiveInt = 200
    init: Literal["known", "hidden"] = "known"
    prior: Literal["continuous", "discrete"] = Field(
        default="continuous",
        description="continuous: targets are fresh records, success = closer than the nearest-neighbour oracle, κ "
                    "estimated; discrete: each target drawn uniformly from `candidates` known records, success = "
                    "the exact candidate, κ = 1/candidates",
    )
    candidates: PositiveInt | None = Field(default=None, le=1_000_000,
                                           description="discrete prior: how many candidates (at least 2)")

    def required_points(self) -> int:
        return self.fixed + self.targets + self.shadow_targets + self.test


class ReconstructionView(View):
    """What a reconstruction attack is given (items of capabilities it did not declare raise
    ``ThreatModelError``); never a target, nor which candidate a model trained on."""

    n_targets: int
    n_classes: int
    n_features: int
    l2: float
    kind: str
    shape: tuple[int, ...]
    seed: int
    prior_kind: str
    n_candidates: int | None
    parameters: Annotated[Models, Grant("parameters")]
    """released model k was trained on D⁻ and target k"""
    fixed_X: Annotated[torch.Tensor, Grant("fixed-set")]
    """D⁻"""
    fixed_y: Annotated[torch.Tensor, Grant("fixed-set")]
    train: Annotated[TrainingProcedure, Grant("training")]
    """the training procedure"""
    init_seed: Annotated[int | None, Grant("training")]
    shadow_X: Annotated[torch.Tensor, Grant("prior")]
    shadow_y: Annotated[torch.Tensor, Grant("prior")]
    candidates_X: Annotated[torch.Tensor | None, Grant("prior")]
    candidates_y: Annotated[torch.Tensor | None, Grant("prior")]


METRICS = (
    Metric("success_rate", "reconstruction", True, "fraction of targets reconstructed closer than the oracle", UNIT,
           trials="n_targets"),
    Metric("mse_mean", "reconstruction", False, "mean squared error between reconstruction and target", NON_NEGATIVE),
    Metric("mse_median", "reconstruction", False, "median squared error between reconstruction and target",
           NON_NEGATIVE),
    Metric("oracle_mse_mean", "reconstruction", False, "mean MSE of the nearest point the adversary holds",
           NON_NEGATIVE),
    Metric("label_accuracy", "reconstruction", True, "fraction of targets whose label was recovered", UNIT,
           trials="n_targets"),
)


def row_mse(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Mean squared difference of corresponding rows, [n]."""
    return ((a.astype(np.float64) - b.astype(np.float64)) ** 2).mean(axis=1)


def pairwise_mse(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[len(a), len(b)] MSE between every row of a and every row of b."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    sq = (a**2).sum(1)[:, None] + (b**2).sum(1)[None, :] - 2.0 * a @ b.T
    return np.maximum(sq, 0.0) / a.shape[1]


def nearest_neighbours(targets: np.ndarray, pool: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each target, the index of the pool row with the smallest MSE to it, and that MSE."""
    idx = pairwise_mse(targets, pool).argmin(axis=1)
    return idx, row_mse(targets, pool[idx])


def prior_mass(targets: np.ndarray, oracle_mse: np.ndarray, candidates: np.ndarray) -> float:
    """κ: the largest share of targets that one fixed guess among ``candidates`` reconstructs closer than their oracle.

    It is what an attack that ignores the released model can reach, the κ of Balle et al.'s bound (success
    <= e^ε κ + δ under (ε, δ)-DP), estimated with the targets as the prior and the candidates as the guesses.
    """
    return float((pairwise_mse(candidates, targets) < oracle_mse[None, :]).mean(axis=1).max())


def kappa_estimate(
    targets: np.ndarray, oracle_mse: np.ndarray, pool: np.ndarray, neighbours: int = 20, shift_steps: int = 10
) -> tuple[float, int]:
    """(κ, guesses searched): a lower estimate of the supremum over guesses of the prior mass within the success
    radius, with the targets as the prior sample and success meaning MSE < the target's oracle MSE.

    Guesses: every target, every pool row, the midpoint of each target and each of its ``neighbours`` nearest
    targets, and ``shift_steps`` mean-shift steps from each of those towards denser regions (a guess moves to the
    mean of the targets weighted by exp(-MSE / (4 × that target's oracle MSE)), a Gaussian kernel twice as wide as
    the success radius, so a guess stuck between two targets sees a third). Every iterate is scored; the best share
    is returned.
    """
    K = len(targets)
    guesses = [targets, pool]
    k = min(neighbours, K - 1)
    if k > 0:
        d = pairwise_mse(targets, targets)
        np.fill_diagonal(d, np.inf)
        near = np.argsort(d, axis=1)[:, :k]
        pairs = np.unique(np.sort(np.stack([np.repeat(np.arange(K), k), near.reshape(-1)], 1), axis=1), axis=0)
        guesses.append((targets[pairs[:, 0]].astype(np.float64) + targets[pairs[:, 1]]) / 2)
    centres = np.concatenate([g.astype(np.float64) for g in guesses])
    best, searched = 0, 0
    for start in range(0, len(centres), 2048):
        current = centres[start : start + 2048]
        for step in range(shift_steps + 1):
            covered = pairwise_mse(current, targets) < oracle_mse[None, :]
            counts = covered.sum(axis=1)
            best, searched = max(best, int(counts.max())), searched + len(current)
            if step == shift_steps:
                break
            weights = np.exp(-pairwise_mse(current, targets) / np.maximum(4.0 * oracle_mse, 1e-300)[None, :])
            total = weights.sum(axis=1, keepdims=True)
            current = np.where(total > 0, weights @ targets.astype(np.float64) / np.maximum(total, 1e-300), current)
    return best / K, searched


def distinct_rows(X: np.ndarray, order: np.ndarray, n: int) -> tuple[np.ndarray, int]:
    """The first ``n`` indices of ``order`` whose rows of X are pairwise distinct,
    and how much of ``order`` that took."""
    seen: set[bytes] = set()
    chosen: list[int] = []
    for position, i in enumerate(order):
        key = np.ascontiguousarray(X[i]).tobytes()
        if key not in seen:
            seen.add(key)
            chosen.append(int(i))
            if len(chosen) == n:
                return np.array(chosen), position + 1
    raise ValueError(f"the dataset has fewer than {n} distinct records outside D⁻ for the candidates")


def reconstruction_metrics(
    targets: np.ndarray,
    records: np.ndarray,
    oracle_mse: np.ndarray,
    target_labels: np.ndarray,
    labels: np.ndarray | None,
) -> tuple[dict, list[str]]:
    """MSE statistics, the share of targets reconstructed strictly closer than their oracle, label accuracy."""
    mse = row_mse(targets, records)
    metrics = {
        "mse_mean": float(mse.mean()),
        "mse_median": float(np.median(mse)),
        "oracle_mse_mean": float(oracle_mse.mean()),
        "success_rate": float((mse < oracle_mse).mean()),
        "label_accuracy": None if labels is None else float((labels == target_labels).mean()),
        "n_targets": len(targets),
    }
    notes = [] if labels is not None else ["label_accuracy null: the attack reconstructs features only"]
    return metrics, notes


class ReconstructionGame(Game):
    """D⁻, targets, shadow targets and test points drawn disjointly per seed; one released model per target."""

    name = "reconstruction"
    Spec = ReconstructionGameSpec
    View = ReconstructionView
    Guess = ReconstructionGuess
    metrics = METRICS
    template_dir = Path(__file__).parent / "templates"
    audit_rule = "arena.games.reconstruction.rule:audit_game"
    audit_view = "arena.games.reconstruction.sections:audit_section"
    report_view = "arena.games.reconstruction.sections:section"
    primary_metric = "success_rate"
    spec: ReconstructionGameSpec

    def __init__(self, spec: ReconstructionGameSpec, dataset: Dataset, seed: int) -> None:
        super().__init__(spec, dataset, seed)
        order = permutation(dataset.n, "reconstruction-split", seed)
        f, t, s = spec.fixed, spec.targets, spec.shadow_targets
        self.fixed = order[:f]
        if spec.prior == "discrete":
            # ``problems`` refuses a discrete prior without candidates
            candidates, used = distinct_rows(dataset.X, order[f:], cast(int, spec.candidates))
            drawn = np.random.default_rng(derive_seed(seed, "reconstruction-draw")).integers(0, len(candidates), t)
            self.candidates: np.ndarray | None = candidates
            self.target_index: np.ndarray | None = drawn  # the secret: which candidate model k trained on
            self.targets = candidates[drawn]
            rest = order[f + used :]
        else:
            self.candidates, self.target_index = None, None
            self.targets = order[f : f + t]
            rest = order[f + t :]
        self.shadow = rest[:s]
        self.test = rest[s : s + spec.test]
        k = np.arange(t)
        self.train_seeds = [derive_seed(seed, "reconstruction-train", i) for i in k]
        if spec.init == "known":
            self.init_seed: int | None = derive_seed(seed, "reconstruction-init")
            self.init_seeds = [self.init_seed] * t
        else:
            self.init_seed = None
            self.init_seeds = [derive_seed(seed, "reconstruction-init", i) for i in k]

    @classmethod
    def problems(  # type: ignore[override]  # narrowed to the game's Spec
        cls, spec: ReconstructionGameSpec, dataset: Dataset
    ) -> list[tuple[str, str]]:
        """The discrete prior needs ``candidates`` >= 2 (and only it takes them); the splits must fit the dataset."""
        if spec.prior == "discrete" and (spec.candidates is None or spec.candidates < 2):
            return [("candidates", "prior 'discrete' needs candidates: n >= 2 (κ = 1/n)")]
        if spec.prior == "continuous" and spec.candidates is not None:
            return [("candidates", "applies to prior 'discrete' only; this game's prior is 'continuous'")]
        drawn = spec.candidates if spec.prior == "discrete" else spec.targets
        assert drawn is not None  # a discrete prior without candidates returned above
        need = spec.fixed + drawn + spec.shadow_targets + spec.test
        if need > dataset.n:
            return [("", f"needs {need} points but dataset {dataset.name!r} has {dataset.n}")]
        return []

    @classmethod
    def train_size(cls, spec: ReconstructionGameSpec) -> int:  # type: ignore[override]  # narrowed to the game's Spec
        return spec.fixed + 1

    def release(self, procedure: TrainingProcedure) -> Release:  # type: ignore[override]  # narrowed to TrainingProcedure
        """Model k trained on D⁻ followed by target k, all K = targets models in one call."""
        fX, fy = self.records(self.fixed)
        tX, ty = self.records(self.targets)
        K = len(self.targets)
        X = torch.cat([fX.expand(K, -1, -1), tX[:, None]], dim=1)
        y = torch.cat([fy.expand(K, -1), ty[:, None]], dim=1)
        models, claim = procedure(X, y, self.init_seeds, self.train_seeds)
        Xt, yt = self.records(self.test)
        return Release(models=models, utility=float(models.accuracy(Xt, yt).mean()), claim=claim)

    def view(  # type: ignore[override]  # narrowed to TrainingProcedure
        self, attack: Attack, release: Release, procedure: TrainingProcedure
    ) -> ReconstructionView:
        """What ``attack`` may see: parameters, D⁻, the procedure and init seed, shadow targets and (discrete prior)
        the candidates; never a target, nor which candidate a model was trained on."""
        fX, fy = self.records(self.fixed)
        sX, sy = self.records(self.shadow)
        cX, cy = (None, None) if self.candidates is None else self.records(self.candidates)
        return ReconstructionView(attack.name, attack.threat_model, {
            "n_targets": len(self.targets),
            "n_classes": self.dataset.n_classes,
            "n_features": self.dataset.n_features,
            "l2": procedure.arch.l2,
            "kind": self.dataset.kind,
            "shape": self.dataset.shape,
            "seed": derive_seed(self.seed, "attack", attack.name),
            "prior_kind": self.spec.prior,
            "n_candidates": self.spec.candidates if self.candidates is not None else None,
            "parameters": release.models,
            "fixed_X": fX,
            "fixed_y": fy,
            "train": procedure,
            "init_seed": self.init_seed,
            "shadow_X": sX,
            "shadow_y": sy,
            "candidates_X": cX,
            "candidates_y": cy,
        })

    def score(self, attack: Attack, guess: Any) -> Outcome:
        """Per target: the reconstruction's MSE against the oracle's (or, discrete prior, the candidate chosen)."""
        if not isinstance(guess, ReconstructionGuess):
            raise TypeError(f"attack {attack.name!r} returned {type(guess).__name__}, not a ReconstructionGuess")
        targets = self.dataset.X[self.targets]
        records = np.asarray(guess.records, dtype=np.float64)
        if records.shape != targets.shape:
            raise ValueError(f"attack {attack.name!r} returned records of shape {records.shape}, need {targets.shape}")
        if not np.all(np.isfinite(records)):
            raise ValueError(f"attack {attack.name!r} returned non-finite reconstructions")
        labels = None if guess.labels is None else np.asarray(guess.labels).reshape(-1)
        if labels is not None and len(labels) != len(targets):
            raise ValueError(f"attack {attack.name!r} returned {len(labels)} labels for {len(targets)} targets")
        pool = self.dataset.X[np.concatenate([self.fixed, self.shadow])]
        nearest, oracle_mse = nearest_neighbours(targets, pool)
        metrics, notes = reconstruction_metrics(targets, records, oracle_mse, self.dataset.y[self.targets], labels)
        if self.candidates is None:
            metrics["kappa"], searched = kappa_estimate(targets, oracle_mse, pool)
            metrics["kappa_exact"] = False
            notes.append(f"kappa is a lower estimate of the supremum over guesses: the best of {searched} guesses "
                         f"searched, on the {len(targets)} targets as the prior sample (resolution "
                         f"1/{len(targets)})")
        else:
            candidates = self.dataset.X[self.candidates]
            chosen = pairwise_mse(records, candidates).argmin(axis=1)
            metrics["success_rate"] = float((chosen == self.target_index).mean())
            metrics["kappa"] = 1.0 / len(candidates)
            metrics["kappa_exact"] = True
            metrics["n_candidates"] = len(candidates)
            notes.append(f"discrete prior: success means the candidate nearest the reconstruction is the target; "
                         f"kappa = 1/{len(candidates)} exactly; oracle_mse from D⁻ and the shadow targets only")
        arrays = {
            "targets": targets,
            "reconstructions": records,
            "nearest_neighbours": pool[nearest],
            "mse": row_mse(targets, records),
            "oracle_mse": oracle_mse,
        }
        return Outcome(metrics, notes, arrays)

    def save_artifacts(self, outcome: Outcome, directory: Path) -> None:
        """grid.png: targets, reconstructions and nearest neighbours side by side (the paper's Figure 4)."""
        a = outcome.arrays
        save_grid(
            directory / GRID_FILE,
            a["targets"],
            a["reconstructions"],
            a["nearest_neighbours"],
            kind=self.dataset.kind,
            shape=self.dataset.shape,
            mse=a["mse"],
            oracle_mse=a["oracle_mse"],
        )
