"""DP-SGD with augmentation multiplicity (De et al. 2022, "Unlocking high-accuracy differentially private image
classification through scale"): M augmented views of every sampled record, their gradients averaged before the
record's gradient is clipped. The mechanism, and so the claim, is DP-SGD's (``dpsgd``): one clipped gradient per
sampled record per step, Poisson rate q, noise σC, σ from the same accountant for the same (ε, δ, q, steps)."""

from __future__ import annotations

import torch
from pydantic import Field, PositiveInt

from arena import DPNoise, FitTask, hookimpl, train_augmult
from arena_plugins.defenses import DPSGD, DPSGDParams


class AugMultParams(DPSGDParams):
    multiplicity: PositiveInt = Field(default=4, le=64, description="M: augmented views per record and step")


class AugMultDPSGD(DPSGD):
    """DP-SGD whose per-record gradient is the mean over M augmentations (needs ``training.augment``)."""

    name = "dpsgd-augmult"
    Params = AugMultParams
    params: AugMultParams
    requires = frozenset({"augment"})

    def train_private(self, task: FitTask, noise: DPNoise) -> dict[str, torch.Tensor]:
        return train_augmult(task.arch, task.X, task.y, task.recipe, task.init_seeds, task.train_seeds, noise,
                             self.params.multiplicity)


@hookimpl
def register_defenses(register) -> None:  # noqa: ANN001
    register(AugMultDPSGD)
