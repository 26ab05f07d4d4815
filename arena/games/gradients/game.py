"""The gradients game: a federated client shares an update computed on a secret batch; the server inverts it.

Per seed the dataset is split, disjointly, into the global model's training records (``pretrain``), a test set, the
attacker's population (its prior) and the client pool. The global model θ₀ is trained on ``pretrain`` through the
track's procedure. Each of ``batches`` trials draws its own client batch of ``batch_size`` records from the client
pool (trials' batches are disjoint; the same batches for every defense of a seed) and one record of it, uniformly,
as the trial's *target*. The client computes its update on its batch under the defense
(``arena.games.gradients.update``); under secure aggregation the server sees the sum of the updates of ``clients``
clients, each with a batch of its own (disjoint from every other). The attacker gets, by its threat model:

* ``parameters``: θ₀ (the model before the update, its architecture) and the shared update;
* ``population``: records from the data distribution, disjoint from every client's;
* ``fixed-set`` (the informed adversary of Balle et al. 2022): every record of the update but the target;
* always: the batch size, how many clients the update sums, the local steps and learning rate, and, when the
  game says ``labels: known``, the labels of the records in the update (shuffled).

It returns one reconstruction per record of the update (and labels). Scoring: the reconstructions are matched to
the client's records one to one (minimum total MSE); PSNR and SSIM of each record against its match; a trial
succeeds when its target's PSNR exceeds ``psnr_threshold``; success rate over trials (independent given θ₀; exact
binomial intervals on the board). κ, the success of the best guess that ignores the update, is estimated over the
client pool (the target's prior) with ``arena.games.reconstruction.kappa_estimate``, for the Hayes et al. bound.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import torch
from pydantic import ConfigDict, Field, PositiveFloat, PositiveInt

from arena.contracts.attack import Attack
from arena.contracts.dataset import Dataset
from arena.contracts.game import Game, Outcome
from arena.contracts.release import Models, Release
from arena.contracts.spec import GameSpec
from arena.contracts.view import Grant, View
from arena.engine.seeds import derive_seed, permutation
from arena.games.gradients.guess import GradientsGuess
from arena.games.gradients.scoring import METRICS, score_trials
from arena.games.gradients.update import UpdateDefense, client_update
from arena.pipeline.procedure import TrainingProcedure

MAX_BATCH = 1024


class GradientsGameSpec(GameSpec):
    """One client's batch size, how many trials, the splits, the local training and what the server knows."""

    model_config = ConfigDict(extra="forbid")
    name: Literal["gradients"]
    batch_size: PositiveInt = Field(default=1, le=MAX_BATCH, description="records in the client's batch (B)")
    batches: PositiveInt = Field(default=16, le=10_000, description="trials: secret client batches per seed")
    pretrain: PositiveInt = Field(default=500, description="records the global model is trained on")
    population: PositiveInt = Field(default=200, description="population records the attacker may be given")
    test: PositiveInt = 200
    local_steps: PositiveInt = Field(default=1, le=1000, description="1: FedSGD (the gradient); more: FedAvg")
    client_lr: PositiveFloat = Field(default=0.1, le=1e3, allow_inf_nan=False)
    labels: Literal["hidden", "known"] = Field(
        default="hidden", description="known: the server is told the labels of the records in the update")
    psnr_threshold: PositiveFloat = Field(default=20.0, le=100.0, allow_inf_nan=False,
                                          description="a trial succeeds when its target's PSNR (dB) exceeds it")

    def required_points(self) -> int:
        return self.pretrain + self.test + self.population + self.batches * self.batch_size


class GradientsView(View):
    """What a gradient-inversion attack is given for one trial; never a record of the client's batch unless it
    declared ``fixed-set`` (then every record of the update but the target)."""

    n_records: int
    """records summed in the update: batch_size × clients; the guess returns one reconstruction per record"""
    batch_size: int
    clients: int
    local_steps: int
    client_lr: float
    n_classes: int
    n_features: int
    kind: str
    shape: tuple[int, ...]
    data_range: tuple[float, float]
    seed: int
    labels: torch.Tensor | None
    """the labels of the update's records, shuffled; None unless the game's ``labels`` is 'known'"""
    model: Annotated[Models, Grant("parameters")]
    """the global model θ₀ the client started from (one model)"""
    update: Annotated[dict[str, torch.Tensor], Grant("parameters")]
    """the shared pseudo-gradient (θ₀ − θ_S)/lr by parameter name, summed over the clients"""
    population_X: Annotated[torch.Tensor, Grant("population")]
    population_y: Annotated[torch.Tensor, Grant("population")]
    known_X: Annotated[torch.Tensor, Grant("fixed-set")]
    """every record of the update but the target, shuffled"""
    known_y: Annotated[torch.Tensor, Grant("fixed-set")]


def clients_of(defense: object) -> int:
    """How many clients' updates the server sees summed under ``defense``."""
    return defense.clients() if isinstance(defense, UpdateDefense) else 1


class GradientsGame(Game):
    """Secret client batches drawn per trial from the client pool; one shared update per trial."""

    name = "gradients"
    Spec = GradientsGameSpec
    View = GradientsView
    Guess = GradientsGuess
    metrics = METRICS
    template_dir = Path(__file__).parent / "templates"
    audit_rule = "arena.games.gradients.rule:audit_game"
    audit_view = "arena.games.gradients.sections:audit_section"
    report_view = "arena.games.gradients.sections:section"
    primary_metric = "target_success_rate"
    spec: GradientsGameSpec

    def __init__(self, spec: GradientsGameSpec, dataset: Dataset, seed: int) -> None:
        super().__init__(spec, dataset, seed)
        order = permutation(dataset.n, "gradients-split", seed)
        p, t, q = spec.pretrain, spec.test, spec.population
        self.pretrain, self.test, self.population = order[:p], order[p : p + t], order[p + t : p + t + q]
        self.pool = order[p + t + q :]
        B, J = spec.batch_size, spec.batches
        self.batches = self.pool[: J * B].reshape(J, B)  # the secret: trial j's client batch
        self.others = self.pool[J * B :]  # other clients' batches under secure aggregation
        self.target_pos = np.random.default_rng(derive_seed(seed, "gradients-target")).integers(0, B, J)
        self._views: dict[str, list[GradientsView]] = {}
        self._clients = 1  # set by trial_views: how many clients the defense's update sums

    @classmethod
    def problems(  # type: ignore[override]  # narrowed to the game's Spec
        cls, spec: GradientsGameSpec, dataset: Dataset
    ) -> list[tuple[str, str]]:
        """The splits must fit the dataset; SSIM needs images of at least 7×7 (other data: PSNR only)."""
        need = spec.required_points()
        if need > dataset.n:
            return [("batches", f"pretrain + test + population + batches × batch_size = {need} records, but "
                                f"dataset {dataset.name!r} has {dataset.n}")]
        return []

    @classmethod
    def defense_problems(  # type: ignore[override]  # narrowed to the game's Spec
        cls, spec: GradientsGameSpec, dataset: Dataset, arch: Any, defense: Any
    ) -> list[tuple[str, str]]:
        """Only defenses of the client's update (``UpdateDefense``) and ``nonprivate`` play; secure aggregation
        needs room for every client's batches."""
        if not isinstance(defense, UpdateDefense) and getattr(defense, "name", None) != "nonprivate":
            return [("name", f"defense {getattr(defense, 'name', '?')!r} trains the model; the 'gradients' game "
                             "plays defenses of a client's update (client-dpsgd, gradient-pruning, quantisation, "
                             "secure-aggregation) and nonprivate (no defense)")]
        n = clients_of(defense)
        need = spec.required_points() + spec.batches * spec.batch_size * (n - 1)
        if need > dataset.n:
            return [("clients", f"{n} clients' batches need {need} records, but dataset {dataset.name!r} has "
                                f"{dataset.n}")]
        return super().defense_problems(spec, dataset, arch, defense)

    @classmethod
    def train_size(cls, spec: GradientsGameSpec) -> int:  # type: ignore[override]  # narrowed to the game's Spec
        return spec.batch_size

    def release(self, procedure: TrainingProcedure) -> Release:  # type: ignore[override]
        """θ₀ trained on the ``pretrain`` records; the claim is the update defense's, for one client's update."""
        X, y = self.records(self.pretrain)
        models, _ = procedure(X[None], y[None], [derive_seed(self.seed, "gradients-init")],
                              [derive_seed(self.seed, "gradients-train")])
        Xt, yt = self.records(self.test)
        defense = procedure.defense
        claim = (defense.update_claim(self.spec.batch_size, self.spec.local_steps)
                 if isinstance(defense, UpdateDefense) else None)
        return Release(models=models, utility=float(models.accuracy(Xt, yt)[0]), claim=claim)

    def update_records(self, j: int, clients: int) -> np.ndarray:
        """Dataset rows of trial j's update: its client's batch, then each other client's."""
        B = self.spec.batch_size
        extra = self.others[j * B * (clients - 1) : (j + 1) * B * (clients - 1)]
        return np.concatenate([self.batches[j], extra])

    def trial_views(self, attack: Attack, release: Release, procedure: TrainingProcedure) -> list[GradientsView]:
        """One view per trial (computed once per attack: the updates are the same for every attack)."""
        if attack.name in self._views:
            return self._views[attack.name]
        spec, defense = self.spec, procedure.defense
        n = self._clients = clients_of(defense)
        module = release.models.module(0, train=True)
        shape = (-1, *release.models.input_shape)
        sX, sy = self.records(self.population)
        lo, hi = float(self.dataset.X.min()), float(self.dataset.X.max())
        views = []
        for j in range(spec.batches):
            rows = self.update_records(j, n)
            generator = torch.Generator().manual_seed(derive_seed(self.seed, "gradients-noise", j))
            total: dict[str, torch.Tensor] = {}
            for c in range(n):
                X, y = self.records(rows[c * spec.batch_size : (c + 1) * spec.batch_size])
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(derive_seed(self.seed, "gradients-dropout", j, c))
                    update = client_update(module, X.reshape(shape).to(module_dtype(module)), y,
                                           steps=spec.local_steps, lr=spec.client_lr, defense=defense,
                                           generator=generator)
                total = {k: total.get(k, 0) + v.detach() for k, v in update.items()}
            shuffle = np.random.default_rng(derive_seed(self.seed, "gradients-shuffle", j)).permutation(len(rows))
            known = rows[shuffle[shuffle != self.target_pos[j]]]
            kX, ky = self.records(known)
            views.append(GradientsView(attack.name, attack.threat_model, {
                "n_records": len(rows), "batch_size": spec.batch_size, "clients": n,
                "local_steps": spec.local_steps, "client_lr": spec.client_lr,
                "n_classes": self.dataset.n_classes, "n_features": self.dataset.n_features,
                "kind": self.dataset.kind, "shape": self.dataset.shape, "data_range": (lo, hi),
                "seed": derive_seed(self.seed, "attack", attack.name, j),
                "labels": self.records(rows[shuffle])[1] if spec.labels == "known" else None,
                "model": release.models, "update": total,
                "population_X": sX, "population_y": sy, "known_X": kX, "known_y": ky,
            }))
        self._views[attack.name] = views
        return views

    def view(  # type: ignore[override]  # narrowed to TrainingProcedure
        self, attack: Attack, release: Release, procedure: TrainingProcedure
    ) -> GradientsView:
        """The first trial's view (``view_groups`` plays every trial)."""
        return self.trial_views(attack, release, procedure)[0]

    def view_groups(  # type: ignore[override]  # narrowed to TrainingProcedure
        self, attack: Attack, release: Release, procedure: TrainingProcedure
    ) -> list[list[GradientsView]]:
        """Every trial's view in one group: trials' records are disjoint, so no view reveals another's target."""
        return [self.trial_views(attack, release, procedure)]

    def score(self, attack: Attack, guess: Any) -> Outcome:
        """Score a guess for the first trial alone."""
        return self.score_all(attack, [guess], trials=1)

    def score_all(self, attack: Attack, guesses: list[Any], trials: int | None = None) -> Outcome:
        """Match each trial's reconstructions to its client batch; PSNR, SSIM, target success, labels, κ."""
        J = self.spec.batches if trials is None else trials
        if len(guesses) != J:
            raise ValueError(f"the gradients game plays {J} trials, got {len(guesses)} guesses")
        expected = self.spec.batch_size * self._clients
        X, y = self.dataset.X, self.dataset.y
        return score_trials(
            attack.name, guesses, records=X[self.batches[:J]], labels=y[self.batches[:J]],
            target_pos=self.target_pos[:J], expected=expected, prior=X[self.pool], population=X[self.population],
            kind=self.dataset.kind, shape=self.dataset.shape, data_range=float(X.max() - X.min()),
            threshold=self.spec.psnr_threshold, labels_known=self.spec.labels == "known")

    def save_artifacts(self, outcome: Outcome, directory: Path) -> None:
        """grid.png: the first trials' records above their matched reconstructions, PSNR under each."""
        from arena.games.gradients.grids import GRID_FILE, save_grid

        save_grid(directory / GRID_FILE, outcome.arrays, kind=self.dataset.kind, shape=self.dataset.shape,
                  batch_size=self.spec.batch_size)


def module_dtype(module: torch.nn.Module) -> torch.dtype:
    return next(module.parameters()).dtype
