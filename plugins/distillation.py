"""Defenses that release a model distilled from others, so that no released output rests on a record's own label:
SELENA (Tang et al., USENIX Security 2022) and distillation for membership privacy (DMP, Shejwalkar &
Houmansadr, AAAI 2021). Teachers train through the engine (every recipe field honoured), batched over the
teachers of all models; the released student trains in plain PyTorch. Both train their teachers on every member;
DMP's student learns on the reference set the challenger gives the defender (``FitTask.reference_X``), never on
members. Neither claims a privacy guarantee."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field, PositiveInt, model_validator

from arena import RECIPE_FIELDS, Defense, Fit, FitTask, Models, PluginParams, derive_seed, hookimpl, train
from arena_plugins.defense_kit import entropy, indexed, refuse_newton, retired, rows, soft_cross_entropy


def seeds_for(seeds: torch.Tensor, tag: str, count: int) -> torch.Tensor:
    """[K·count] seeds: ``count`` per model, model-major, from each of ``seeds`` and ``tag``."""
    return torch.tensor([derive_seed(int(s), tag, j) for s in seeds.tolist() for j in range(count)],
                        dtype=torch.int64, device=seeds.device)


def distil(task: FitTask, student: FitTask, targets: torch.Tensor) -> Fit:
    """Train ``task``'s K seeded models on the rows of ``student`` (an ``indexed`` task) against soft ``targets``
    [K, m, C] by position; with the recipe's optimiser and release rule."""
    ensemble = task.ensemble()
    opt = task.optimizer(ensemble)
    for X, pos, valid in student.minibatches():
        opt.zero_grad(set_to_none=True)
        soft_cross_entropy(ensemble(X), rows(targets, pos), valid).backward()
        opt.step()
    return task.finish(ensemble, opt)


class SELENAParams(PluginParams):
    submodels: PositiveInt = Field(default=5, ge=2, le=64, description=(
        "K: sub-models of Split-AI (the paper's K = 25; 5 by default to keep the catalog's runtime, as each "
        "sub-model is one more training)"))
    excluded: PositiveInt = Field(default=2, le=63, description=(
        "L: sub-models each record is excluded from, a random L of the K (the paper's L = 10; 2 by default)"))

    @model_validator(mode="after")
    def _fewer_excluded(self) -> SELENAParams:
        if self.excluded >= self.submodels:
            raise ValueError(f"excluded ({self.excluded}) must be below submodels ({self.submodels})")
        return self


def split_ai_deal(n: int, submodels: int, excluded: int, seed: int) -> torch.Tensor:
    """Split-AI's deal of ``n`` records to K = ``submodels`` sub-models (Tang et al. 2022, Algorithm 1): [K, n],
    True where record i is excluded from sub-model s. Each record draws L = ``excluded`` non-model indices, a
    uniformly random L-subset of the K, and is in the training sets of the other K − L. The engine trains
    equal-sized training sets in one batch, so the deal is then balanced: exclusions move, a random movable record
    at a time, from sub-models above their share of the n·L exclusions to sub-models below it (shares differ by
    at most one, which sub-models take the larger chosen at random), each record keeping exactly L. Relabelling
    the sub-models leaves the procedure's law unchanged, so each record's subset stays uniform over the L-subsets."""
    K, L = submodels, excluded
    rng = np.random.default_rng(seed)
    chosen = np.argsort(rng.random((n, K)), axis=1)[:, :L]
    out = np.zeros((n, K), dtype=bool)
    np.put_along_axis(out, chosen, True, axis=1)
    out = np.ascontiguousarray(out.T)
    base, extra = divmod(n * L, K)
    target = np.full(K, base)
    target[rng.permutation(K)[:extra]] += 1
    count = out.sum(1)
    while (over := np.flatnonzero(count > target)).size:
        a, b = over[0], np.flatnonzero(count < target)[0]
        moves = int(min(count[a] - target[a], target[b] - count[b]))
        pick = rng.choice(np.flatnonzero(out[a] & ~out[b]), size=moves, replace=False)
        out[a, pick], out[b, pick] = False, True
        count[a] -= moves
        count[b] += moves
    return torch.from_numpy(out)


class SELENA(Defense):
    """SELENA: Split-AI (K sub-models, each record excluded from a random L of them and in the training sets of
    the other K − L; a record's soft label is the average output of the L sub-models that never saw it) then
    self-distillation (the released model trains on every member against those soft labels), so that the
    release's outputs on members are those of models for which they are non-members (Tang et al. 2022; paper:
    K = 25, L = 10). Uses no data besides the members. Cost: K + 1 trainings."""

    name = "selena"
    version = "2"
    Params = SELENAParams
    params: SELENAParams
    honours = RECIPE_FIELDS - {"solver"}

    def validate_for(self, n_train: int) -> list[tuple[str, str]]:
        K, L = self.params.submodels, self.params.excluded
        if n_train - math.ceil(n_train * L / K) < 1:
            return [("excluded", f"with {n_train} members, K = {K} and L = {L} leave a sub-model no training record")]
        return []

    def fit(self, task: FitTask) -> Fit:
        refuse_newton(self.name, task)
        M, L = self.params.submodels, self.params.excluded
        K, n = task.k, task.n
        excluded = torch.stack([split_ai_deal(n, M, L, derive_seed(int(s), "selena-deal"))
                                for s in task.train_seeds.tolist()]).to(task.device)  # [K, M, n]
        init = seeds_for(task.init_seeds, "selena-init", M)
        seeds = seeds_for(task.train_seeds, "selena-train", M)
        sizes = n - excluded.sum(-1)  # [K, M]: differ by at most one, so at most two batches of sub-models
        probs = torch.empty(K, M, n, task.arch.n_classes, dtype=task.X.dtype, device=task.device)
        for size in sizes.unique().tolist():
            ks, ss = torch.nonzero(sizes == size, as_tuple=True)
            idx = torch.stack([torch.nonzero(~excluded[k, s]).squeeze(-1) for k, s in zip(ks.tolist(), ss.tolist())])
            flat = ks * M + ss
            state = train(task.arch, rows(task.X[ks], idx), rows(task.y[ks], idx), task.recipe, init[flat],
                          seeds[flat])
            probs[ks, ss] = Models(task.arch, state).predict_proba(task.X[ks]).to(probs.dtype)
        weight = excluded.to(probs.dtype).unsqueeze(-1)
        targets = (probs * weight).sum(1) / weight.sum(1)  # [K, n, C]
        return distil(task, indexed(task), targets)


class DMPParams(PluginParams):
    temperature: float = Field(default=1.0, gt=0.0, le=100.0, allow_inf_nan=False,
                               description="T: the student learns softmax(teacher logits / T)")
    keep: float = Field(default=1.0, gt=0.0, le=1.0, allow_inf_nan=False,
                        description="fraction of the reference set kept, lowest teacher entropy first")
    _retired = retired("dmp", "reference")


class DMP(Defense):
    """Distillation for membership privacy (Shejwalkar & Houmansadr 2021): an unprotected teacher trains on every
    member; the released student trains only on the reference set (population records the challenger gives the
    defender, disjoint from the members and the challenge; their labels unused) against the teacher's soft labels
    at temperature T, keeping the reference records whose teacher output has the lowest entropy (the paper's
    selection). Cost: two trainings."""

    name = "dmp"
    version = "2"
    Params = DMPParams
    params: DMPParams
    honours = RECIPE_FIELDS - {"solver"}
    needs_reference = True

    def fit(self, task: FitTask) -> Fit:
        refuse_newton(self.name, task)
        p = self.params
        Xr, _ = task.reference(self.name)
        teacher = train(task.arch, task.X, task.y, task.recipe, seeds_for(task.init_seeds, "dmp-teacher", 1),
                        seeds_for(task.train_seeds, "dmp-teacher", 1))
        logits = Models(task.arch, teacher).logits(Xr)
        count = max(1, round(p.keep * Xr.shape[1]))
        chosen = entropy(logits).argsort(dim=1, stable=True)[:, :count].sort(dim=1).values
        targets = F.softmax(rows(logits, chosen) / p.temperature, dim=-1)
        return distil(task, indexed(dataclasses.replace(task, X=Xr), chosen, "dmp-student"), targets)


@hookimpl
def register_defenses(register) -> None:  # noqa: ANN001
    register(SELENA)
    register(DMP)
