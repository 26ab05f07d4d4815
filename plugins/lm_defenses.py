"""Defenses of the language track, for causal language models on token records: fine-tuning without privacy, of
the whole model or of LoRA adapters; DP-SGD fine-tuning (full or LoRA) calibrated and accounted by the arena's
accountant like the image track's DP-SGD; and deduplication (Kandpal, Wallace & Raffel 2022) as a data-side
baseline: a record sharing an n-gram of ``ngram`` tokens with an earlier record is not trained on.

Each trains in plain PyTorch (``arena.train_lm``) with Adam (or SGD with the recipe's momentum) and honours the
recipe's epochs, learning rate, batch size and momentum.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import Field, PositiveFloat, PositiveInt

from arena import (
    PAD,
    Claim,
    Defense,
    DPNoise,
    Fit,
    FitTask,
    LoRA,
    PluginParams,
    accountant_label,
    calibrate_noise,
    hookimpl,
    steps_and_rate,
    train_lm,
)
from arena_plugins.defenses import Epsilon, EpsilonSweep, delta_problems

HONOURS = frozenset({"epochs", "lr", "batch_size", "momentum"})


class FineTuneParams(PluginParams):
    lora: PositiveInt | None = Field(default=None, le=1024, description="LoRA rank (None: fine-tune every weight)")
    alpha: PositiveFloat = Field(default=16.0, le=1e4, description="LoRA scale numerator (scale alpha/rank)")
    optimizer: Literal["adam", "sgd"] = "adam"


def _lora(params: FineTuneParams) -> LoRA | None:
    return None if params.lora is None else LoRA(params.lora, params.alpha)


def _check_text(task: FitTask, name: str) -> None:
    if task.X.ndim != 3 or len(task.arch.input_shape) != 1:
        raise ValueError(f"{name} trains language models on token records (a text dataset)")


class FineTune(Defense):
    """Non-private fine-tuning: the mean next-token loss over shuffled batches, every weight or LoRA adapters."""

    name = "lm-finetune"
    Params = FineTuneParams
    honours = HONOURS
    params: FineTuneParams

    def fit(self, task: FitTask) -> Fit:
        _check_text(task, self.name)
        return Fit(train_lm(task.arch, task.X, task.init_seeds, task.train_seeds, task.recipe,
                            lora=_lora(self.params), optimizer=self.params.optimizer), None)


class LMDPSGDParams(FineTuneParams):
    epsilons: list[Epsilon] = Field(min_length=1, description="one configuration per target ε, each in [1e-3, 1e3]")
    delta: float = Field(strict=True, ge=1e-12, lt=1.0, allow_inf_nan=False, description="in [1e-12, 1/N)")
    clip: PositiveFloat = Field(default=1.0, strict=True, le=1e6, allow_inf_nan=False)
    accountant: Literal["rdp", "pld"] = "rdp"


class LMDPSGD(EpsilonSweep):
    """DP-SGD fine-tuning: Poisson samples at q = B/N, each record's gradient (of every weight, or of the LoRA
    matrices) clipped to C, N(0, σ²C²) on the sum, σ from the accountant for the target ε; add/remove relation on
    records."""

    name = "lm-dpsgd"
    Params = LMDPSGDParams
    per_example_gradients = True
    honours = HONOURS
    row_note = ("DP-SGD by arena.train_lm: each sampled record's gradient by torch.func.vmap(grad), clipped and "
                "noised in plain PyTorch (not Opacus), one model at a time")
    params: LMDPSGDParams

    def target_delta(self) -> float:
        return self.params.delta

    def validate_for(self, n_train: int) -> list[tuple[str, str]]:
        return delta_problems(self.params.delta, n_train)

    def fit(self, task: FitTask) -> Fit:
        _check_text(task, self.name)
        steps, q = steps_and_rate(task.n, task.recipe)
        sigma, achieved = calibrate_noise(self.target_epsilon(), q, steps, self.params.delta, self.params.accountant)
        state = train_lm(task.arch, task.X, task.init_seeds, task.train_seeds, task.recipe,
                         dp=DPNoise(clip=self.params.clip, noise_multiplier=sigma), lora=_lora(self.params),
                         optimizer=self.params.optimizer)
        what = f"LoRA rank {self.params.lora}" if self.params.lora else "every weight"
        return Fit(state, Claim(epsilon=achieved, delta=self.params.delta,
                                accountant=accountant_label(self.params.accountant),
                                target_epsilon=self.target_epsilon(), noise_multiplier=sigma, sample_rate=q,
                                steps=steps, mechanism=f"DP-SGD fine-tuning ({what}), Poisson-subsampled Gaussian, "
                                                       "add/remove"))


class DedupParams(FineTuneParams):
    ngram: PositiveInt = Field(default=16, ge=2, le=4096, description="tokens an n-gram shared with an earlier "
                                                                        "record must have to drop a record")


def duplicates(X: np.ndarray, ngram: int) -> np.ndarray:
    """Which records [n] (token ids, PAD-padded) share an ``ngram``-token window with an earlier kept record (or,
    shorter than ``ngram``, equal one exactly): True for each record deduplication drops."""
    seen: set[bytes] = set()
    drop = np.zeros(len(X), dtype=bool)
    for i, row in enumerate(X):
        ids = row[row != PAD].astype(np.int64)
        windows = ([ids.tobytes()] if len(ids) < ngram else
                   [ids[j:j + ngram].tobytes() for j in range(len(ids) - ngram + 1)])
        if any(w in seen for w in windows):
            drop[i] = True
        else:
            seen.update(windows)
    return drop


class Dedup(Defense):
    """Deduplication, then non-private fine-tuning on the records kept (each model its own training set)."""

    name = "lm-dedup"
    Params = DedupParams
    honours = HONOURS
    params: DedupParams

    def fit(self, task: FitTask) -> Fit:
        _check_text(task, self.name)
        states = []
        for k in range(task.k):
            keep = ~duplicates(task.X[k].cpu().numpy(), self.params.ngram)
            Xk = task.X[k][torch.from_numpy(keep).to(task.device)]
            states.append(train_lm(task.arch, Xk.unsqueeze(0), task.init_seeds[k:k + 1], task.train_seeds[k:k + 1],
                                   task.recipe, lora=_lora(self.params), optimizer=self.params.optimizer))
        return Fit({name: torch.cat([s[name] for s in states]) for name in states[0]}, None)


@hookimpl
def register_defenses(register) -> None:  # noqa: ANN001
    register(FineTune)
    register(LMDPSGD)
    register(Dedup)
