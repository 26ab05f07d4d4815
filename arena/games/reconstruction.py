"""The reconstruction game (Balle, Cherubin & Hayes 2022): an informed adversary who knows D⁻ rebuilds the target.

Per seed the dataset is split into a fixed set D⁻, a target pool, the adversary's shadow targets (its prior) and
a test set, all disjoint. Released model k is trained on D⁻ ∪ {z_k}; all of them come from one batched call of
the training procedure. The adversary gets the released parameters, D⁻, the procedure (and the initialisation
seed when it is known) and the shadow targets, never a target. Scoring is per target: the MSE between the
reconstruction and z, against the nearest-neighbour oracle, the closest point the adversary already holds
(D⁻ ∪ shadow targets); a target is reconstructed when its MSE is strictly below its oracle's. Metrics: mse_mean,
mse_median, oracle_mse_mean, success_rate, label_accuracy (null when the attack returns no labels), n_targets,
and kappa, the success a guess that ignores the model reaches (for the DP audit's bound e^ε κ + δ).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from arena.attack import Attack, ReconstructionGuess
from arena.data import Dataset, derive_seed, permutation
from arena.games.base import Game, Outcome
from arena.games.view import View
from arena.procedure import TrainingProcedure
from arena.release import Release
from arena.report.grids import GRID_FILE, save_grid
from arena.scenario import ReconstructionGameSpec


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
    capabilities = frozenset({"parameters", "fixed-set", "training", "prior"})
    spec: ReconstructionGameSpec

    def __init__(self, spec: ReconstructionGameSpec, dataset: Dataset, seed: int) -> None:
        super().__init__(spec, dataset, seed)
        order = permutation(dataset.n, "reconstruction-split", seed)
        f, t, s = spec.fixed, spec.targets, spec.shadow_targets
        self.fixed = order[:f]
        self.targets = order[f : f + t]
        self.shadow = order[f + t : f + t + s]
        self.test = order[f + t + s : f + t + s + spec.test]
        k = np.arange(t)
        self.train_seeds = [derive_seed(seed, "reconstruction-train", i) for i in k]
        if spec.init == "known":
            self.init_seed: int | None = derive_seed(seed, "reconstruction-init")
            self.init_seeds = [self.init_seed] * t
        else:
            self.init_seed = None
            self.init_seeds = [derive_seed(seed, "reconstruction-init", i) for i in k]

    @classmethod
    def train_size(cls, spec: ReconstructionGameSpec) -> int:
        return spec.fixed + 1

    def release(self, procedure: TrainingProcedure) -> Release:
        """Model k trained on D⁻ followed by target k, all K = targets models in one call."""
        fX, fy = self.records(self.fixed)
        tX, ty = self.records(self.targets)
        K = len(self.targets)
        X = torch.cat([fX.expand(K, -1, -1), tX[:, None]], dim=1)
        y = torch.cat([fy.expand(K, -1), ty[:, None]], dim=1)
        models, claim = procedure(X, y, self.init_seeds, self.train_seeds)
        Xt, yt = self.records(self.test)
        return Release(models=models, utility=float(models.accuracy(Xt, yt).mean()), claim=claim)

    def view(self, attack: Attack, release: Release, procedure: TrainingProcedure) -> View:
        """What ``attack`` may see: parameters, D⁻, the procedure and init seed, shadow targets; never a target."""
        fX, fy = self.records(self.fixed)
        sX, sy = self.records(self.shadow)
        return View(
            attack.name,
            attack.threat_model,
            common={
                "n_targets": len(self.targets),
                "n_classes": self.dataset.n_classes,
                "n_features": self.dataset.n_features,
                "l2": procedure.arch.l2,
                "kind": self.dataset.kind,
                "shape": self.dataset.shape,
                "seed": derive_seed(self.seed, "attack", attack.name),
            },
            by_capability={
                "parameters": {"parameters": release.models},
                "fixed-set": {"fixed_X": fX, "fixed_y": fy},
                "training": {"train": procedure, "init_seed": self.init_seed},
                "prior": {"shadow_X": sX, "shadow_y": sy},
            },
        )

    def play(self, attack: Attack, release: Release, procedure: TrainingProcedure) -> Outcome:
        guess = attack.run(self.view(attack, release, procedure))
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
        metrics["kappa"] = prior_mass(targets, oracle_mse, np.concatenate([targets, pool]))
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
