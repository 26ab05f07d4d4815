"""Defenses that release a model distilled from others, so that no released output rests on a record's own label:
SELENA (Tang et al., USENIX Security 2022) and distillation for membership privacy (DMP, Shejwalkar &
Houmansadr, AAAI 2021). Teachers train through the engine (every recipe field honoured), batched over all K·M
teachers; the released student trains in plain PyTorch. Neither claims a privacy guarantee."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field, PositiveInt, model_validator

from arena import RECIPE_FIELDS, Defense, Fit, FitTask, Models, PluginParams, derive_seed, hookimpl, train
from arena_plugins.defense_kit import entropy, fraction, indexed, refuse_newton, rows, soft_cross_entropy, split


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
    submodels: PositiveInt = Field(default=5, ge=2, le=64, description="K: sub-models of Split-AI")
    excluded: PositiveInt = Field(default=2, le=63, description="L: sub-models each record is kept from")

    @model_validator(mode="after")
    def _fewer_excluded(self) -> SELENAParams:
        if self.excluded >= self.submodels:
            raise ValueError(f"excluded ({self.excluded}) must be below submodels ({self.submodels})")
        return self


def split_ai_plan(task: FitTask, submodels: int, excluded: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Split-AI's assignment, per model: (training rows [K, M, m] of each of the M sub-models, and a mask
    [K, M, n] of the sub-models a record is kept from). Records are dealt in a random order (the model's seed);
    the record at position i is kept from the L sub-models (i + j) mod M, j < L, so each sub-model trains on
    (M − L)/M of the records; sub-models are cut to the smallest count (a record so cut is kept from it too)."""
    n, M, L = task.n, submodels, excluded
    perm = torch.stack([torch.randperm(n, generator=torch.Generator().manual_seed(
        derive_seed(int(s), "selena-deal"))) for s in task.train_seeds.tolist()]).to(task.device)
    position = torch.empty_like(perm).scatter_(1, perm, torch.arange(n, device=task.device).expand_as(perm))
    offset = (torch.arange(M, device=task.device).view(1, M, 1) - position.unsqueeze(1) % M) % M  # [K, M, n]
    kept_from = offset < L
    m = int((~kept_from[0, :, :]).sum(-1).min())
    train_rows = torch.stack([torch.stack([torch.nonzero(~kept_from[k, s]).squeeze(-1)[:m] for s in range(M)])
                              for k in range(task.k)])
    trained = torch.zeros_like(kept_from).scatter_(2, train_rows, True)
    return train_rows, ~trained


class SELENA(Defense):
    """SELENA: Split-AI (M sub-models, each record kept from L of them; a record's soft label is the average
    output of the sub-models that never saw it) then self-distillation (the released model trains on the whole
    training set against those soft labels), so that the release's outputs on members are those of models for
    which they are non-members (Tang et al. 2022; paper: M = 25, L = 10). Cost: M + 1 trainings."""

    name = "selena"
    Params = SELENAParams
    params: SELENAParams
    honours = RECIPE_FIELDS - {"solver"}

    def fit(self, task: FitTask) -> Fit:
        refuse_newton(self.name, task)
        M = self.params.submodels
        train_rows, kept_from = split_ai_plan(task, M, self.params.excluded)
        K, m = task.k, train_rows.shape[-1]
        flat = train_rows.reshape(K * M, m)
        Xs = rows(task.X.repeat_interleave(M, dim=0), flat)
        ys = rows(task.y.repeat_interleave(M, dim=0), flat)
        state = train(task.arch, Xs, ys, task.recipe, seeds_for(task.init_seeds, "selena-init", M),
                      seeds_for(task.train_seeds, "selena-train", M))
        probs = Models(task.arch, state).predict_proba(task.X.repeat_interleave(M, dim=0))
        probs = probs.reshape(K, M, task.n, -1)
        weight = kept_from.to(probs.dtype).unsqueeze(-1)
        targets = (probs * weight).sum(1) / weight.sum(1)  # [K, n, C]
        return distil(task, indexed(task), targets)


class DMPParams(PluginParams):
    reference: float = fraction(0.5, "fraction of the training set the teacher never sees (the reference set)")
    temperature: float = Field(default=1.0, gt=0.0, le=100.0, allow_inf_nan=False,
                               description="T: the student learns softmax(teacher logits / T)")
    keep: float = Field(default=1.0, gt=0.0, le=1.0, allow_inf_nan=False,
                        description="fraction of the reference set kept, lowest teacher entropy first")


class DMP(Defense):
    """Distillation for membership privacy (Shejwalkar & Houmansadr 2021): an unprotected teacher trains on the
    private part of the data; the released student trains only on a reference set (here a held-out split of the
    training set) against the teacher's soft labels at temperature T, keeping the reference records whose teacher
    output has the lowest entropy (the paper's selection). Cost: two trainings."""

    name = "dmp"
    Params = DMPParams
    params: DMPParams
    honours = RECIPE_FIELDS - {"solver"}

    def fit(self, task: FitTask) -> Fit:
        refuse_newton(self.name, task)
        p = self.params
        private, reference = split(task, p.reference, "dmp")
        teacher = train(task.arch, rows(task.X, private), rows(task.y, private), task.recipe,
                        seeds_for(task.init_seeds, "dmp-teacher", 1), seeds_for(task.train_seeds, "dmp-teacher", 1))
        Xr = rows(task.X, reference)
        logits = Models(task.arch, teacher).logits(Xr)
        count = max(1, round(p.keep * reference.shape[1]))
        chosen = entropy(logits).argsort(dim=1, stable=True)[:, :count].sort(dim=1).values
        targets = F.softmax(rows(logits, chosen) / p.temperature, dim=-1)
        return distil(task, indexed(task, rows(reference, chosen), "dmp-student"), targets)


@hookimpl
def register_defenses(register) -> None:  # noqa: ANN001
    register(SELENA)
    register(DMP)
