"""Empirical defenses that change the training loss or when training stops, in plain PyTorch on the defense API:
label smoothing (Szegedy et al. 2016), early stopping on the reference set, and MixupMMD (Li, Li & Ribeiro 2021).
Every member is trained on; early stopping and MixupMMD watch population records the challenger gives the defender
(``FitTask.reference_X``), never members. None claims a privacy guarantee."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field, PositiveInt

from arena import RECIPE_FIELDS, Defense, Fit, FitTask, PluginParams, hookimpl
from arena_plugins.defense_kit import (
    indexed,
    masked_mean,
    model_seeds,
    refuse_newton,
    retired,
    rows,
    soft_cross_entropy,
    steps_per_epoch,
)


class LabelSmoothingParams(PluginParams):
    smoothing: float = Field(gt=0.0, lt=1.0, allow_inf_nan=False,
                             description="ε: the target is (1 - ε)·onehot(y) + ε/C, in (0, 1)")


class LabelSmoothing(Defense):
    """Cross-entropy against smoothed labels (1 − ε)·onehot(y) + ε/C: members' outputs stay off the simplex's
    corners, which weakens confidence-based attacks a little (Szegedy et al. 2016; studied for membership privacy
    by Kaya & Dumitras 2021)."""

    name = "label-smoothing"
    Params = LabelSmoothingParams
    params: LabelSmoothingParams
    honours = RECIPE_FIELDS - {"solver"}

    def fit(self, task: FitTask) -> Fit:
        refuse_newton(self.name, task)
        ensemble, C, eps = task.ensemble(), task.arch.n_classes, self.params.smoothing
        opt = task.optimizer(ensemble)
        for X, y, valid in task.minibatches():
            target = F.one_hot(y, C).to(X.dtype) * (1.0 - eps) + eps / C
            opt.zero_grad(set_to_none=True)
            soft_cross_entropy(ensemble(X), target, valid).backward()
            opt.step()
        return task.finish(ensemble, opt)


class EarlyStoppingParams(PluginParams):
    patience: PositiveInt = Field(default=5, le=10_000,
                                  description="epochs without a better loss on the reference set to stop")
    _retired = retired("early-stopping", "holdout")


class EarlyStopping(Defense):
    """Train on every member and release, per model, the epoch with the lowest loss on the reference set (population
    records outside the training set, the validation data; stopping once ``patience`` epochs bring no improvement):
    the classical remedy for the overfitting that membership inference exploits. Costs at most the recipe's
    epochs."""

    name = "early-stopping"
    version = "2"
    Params = EarlyStoppingParams
    params: EarlyStoppingParams
    honours = RECIPE_FIELDS - {"solver", "ema"}
    needs_reference = True

    def fit(self, task: FitTask) -> Fit:
        refuse_newton(self.name, task)
        Xh, yh = task.reference(self.name)
        ensemble = task.ensemble()
        opt = task.optimizer(ensemble)
        per_epoch = steps_per_epoch(task)
        best = ensemble.detached()
        with torch.no_grad():
            best_loss = self._held_loss(ensemble, Xh, yh)
        waited = torch.zeros(task.k, dtype=torch.int64, device=task.device)
        for step, (X, y, valid) in enumerate(task.minibatches()):
            opt.zero_grad(set_to_none=True)
            ce = F.cross_entropy(ensemble(X).transpose(1, 2), y, reduction="none")
            masked_mean(ce, valid).sum().backward()
            opt.step()
            if (step + 1) % per_epoch:
                continue
            with torch.no_grad():
                loss = self._held_loss(ensemble, Xh, yh)
                live = waited < self.params.patience
                better = live & (loss < best_loss)
                best_loss = torch.where(better, loss, best_loss)
                waited = torch.where(better, 0, waited + live.to(torch.int64))
                for name, p in ensemble.state().items():
                    mask = better.reshape(-1, *([1] * (p.ndim - 1)))
                    best[name] = torch.where(mask, p.detach(), best[name])
            if bool((waited >= self.params.patience).all()):
                break
        return Fit(best, None)

    @staticmethod
    def _held_loss(ensemble: torch.nn.Module, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(ensemble(X).transpose(1, 2), y, reduction="none").mean(dim=1)


class MixupMMDParams(PluginParams):
    lam: float = Field(default=1.0, ge=0.0, le=1e4, allow_inf_nan=False, description="weight λ of the MMD term")
    mixup_alpha: float = Field(default=1.0, gt=0.0, le=100.0, allow_inf_nan=False,
                               description="mixup's Beta(α, α) for the mixing weight")
    bandwidth: float = Field(default=1.0, gt=0.0, le=100.0, allow_inf_nan=False,
                             description="σ of the Gaussian kernel on softmax outputs")
    _retired = retired("mixup-mmd", "validation")


def class_mmd(P: torch.Tensor, yp: torch.Tensor, Q: torch.Tensor, yq: torch.Tensor, sigma: float,
              wp: torch.Tensor | None = None) -> torch.Tensor:
    """[K] per model, the mean over classes present in both sets of the (biased) squared MMD, Gaussian kernel of
    width σ, between outputs P [K, B, C] of class c (labels yp [K, B], row weights wp) and Q [K, V, C] (yq)."""
    C = P.shape[-1]
    mp = F.one_hot(yp, C).to(P.dtype) * (1.0 if wp is None else wp.to(P.dtype).unsqueeze(-1))
    mq = F.one_hot(yq, C).to(P.dtype)
    np_, nq = mp.sum(1), mq.sum(1)  # [K, C]

    def kernel(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.exp(-torch.cdist(A, B).square() / (2 * sigma**2))

    def term(A: torch.Tensor, ma: torch.Tensor, B: torch.Tensor, mb: torch.Tensor) -> torch.Tensor:
        return torch.einsum("kic,kij,kjc->kc", ma, kernel(A, B), mb)

    both = (np_ > 0) & (nq > 0)
    a, b = np_.clamp_min(1.0), nq.clamp_min(1.0)
    mmd = term(P, mp, P, mp) / a**2 + term(Q, mq, Q, mq) / b**2 - 2 * term(P, mp, Q, mq) / (a * b)
    return (mmd * both).sum(1) / both.sum(1).clamp_min(1)


class MixupMMD(Defense):
    """MixupMMD (Li, Li & Ribeiro, CODASPY 2021): cross-entropy on mixup of each training batch (x̃ = λx + (1−λ)x',
    ỹ likewise, λ ~ Beta(α, α)) plus λ_MMD times the class-conditional squared MMD between the softmax outputs on
    the (clean) training batch and on an equal-sized batch of the validation set, which pulls the output
    distributions of members and non-members together. Every member is trained on; the validation set is the
    reference set (population records outside the training set). Draws from each model's own seed."""

    name = "mixup-mmd"
    version = "2"
    Params = MixupMMDParams
    params: MixupMMDParams
    honours = RECIPE_FIELDS - {"solver"}
    needs_reference = True

    def fit(self, task: FitTask) -> Fit:
        refuse_newton(self.name, task)
        p = self.params
        Xv, yv = task.reference(self.name)
        sub = indexed(task)
        gens = [np.random.default_rng(s) for s in model_seeds(task, "mixup-mmd")]
        ensemble = task.ensemble()
        opt = task.optimizer(ensemble)
        C, V = task.arch.n_classes, Xv.shape[1]
        for X, pos, valid in sub.minibatches():
            K, B = pos.shape
            y = task.y.gather(1, pos)
            draws = [(g.beta(p.mixup_alpha, p.mixup_alpha), g.permutation(B), g.integers(0, V, B)) for g in gens]
            lam = torch.tensor([d[0] for d in draws], dtype=X.dtype, device=X.device)
            perm = torch.from_numpy(np.stack([d[1] for d in draws])).to(X.device)
            vrow = torch.from_numpy(np.stack([d[2] for d in draws])).to(X.device)
            shape = (K, 1, *([1] * (X.ndim - 2)))
            mixed = lam.reshape(shape) * X + (1 - lam.reshape(shape)) * rows(X, perm)
            onehot = F.one_hot(y, C).to(X.dtype)
            target = lam.reshape(K, 1, 1) * onehot + (1 - lam.reshape(K, 1, 1)) * rows(onehot, perm)
            mix_valid = valid if valid is None else valid & valid.gather(1, perm)
            loss = soft_cross_entropy(ensemble(mixed), target, mix_valid)
            P = ensemble(X).softmax(-1)
            Q = ensemble(rows(Xv, vrow)).softmax(-1)
            loss = loss + p.lam * class_mmd(P, y, Q, yv.gather(1, vrow), p.bandwidth, valid).sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return task.finish(ensemble, opt)


@hookimpl
def register_defenses(register) -> None:  # noqa: ANN001
    register(LabelSmoothing)
    register(EarlyStopping)
    register(MixupMMD)
