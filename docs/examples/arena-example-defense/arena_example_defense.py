"""A defense plugin in plain PyTorch: label smoothing (Szegedy et al. 2016), which trains on the soft targets
(1 - s)·onehot(y) + s/C and so keeps the members' loss from falling to zero. It claims no privacy guarantee.

Scenario files name it ``defenses: [{name: example-label-smoothing, smoothing: 0.2}]``. ``fit`` receives a
``FitTask`` holding K training sets at once and trains K models on it with ordinary autograd and ``torch.optim``:
``task.ensemble()`` is one ``nn.Module`` holding the K seeded models (logits [K, B, C] for inputs [K, B, ...]),
``task.optimizer(ensemble)`` the recipe's SGD, ``task.minibatches()`` its batches, ``task.finish`` the result.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field

from arena import RECIPE_FIELDS, Defense, Fit, FitTask, PluginParams, hookimpl


class LabelSmoothingParams(PluginParams):
    smoothing: float = Field(default=0.1, ge=0.0, lt=1.0, description="mass s spread uniformly over the classes")


def smoothed_loss(logits: torch.Tensor, y: torch.Tensor, valid: torch.Tensor | None, smoothing: float) -> torch.Tensor:
    """The sum over the K models of each model's mean smoothed cross-entropy on its batch.

    ``logits`` [K, B, C], ``y`` [K, B]; ``valid`` [K, B] marks the real examples of a padded batch (None: all).
    Summing per-model means gives each model exactly the gradient of its own loss.
    """
    K, B, C = logits.shape
    ce = F.cross_entropy(logits.reshape(K * B, C), y.reshape(K * B), reduction="none",
                         label_smoothing=smoothing).reshape(K, B)
    weight = torch.ones_like(ce) if valid is None else valid.to(ce.dtype)
    return ((ce * weight).sum(dim=1) / weight.sum(dim=1).clamp_min(1.0)).sum()


class LabelSmoothing(Defense):
    """Non-private training on label-smoothed targets, with the track's recipe (epochs, lr, momentum, batches,
    augmentation, the moving average of the iterates) and the model's l2 penalty."""

    name = "example-label-smoothing"
    version = "1"
    Params = LabelSmoothingParams
    params: LabelSmoothingParams
    # The recipe fields this training follows: all but the exact solver (a scenario asking for solver 'newton'
    # is refused before any work, at the field that asks).
    honours = RECIPE_FIELDS - {"solver"}

    def fit(self, task: FitTask) -> Fit:
        ensemble = task.ensemble()
        # SGD as the engine steps: the recipe's lr and momentum, model.l2 as weight decay on the weight tensors
        # only, and the recipe's moving average of the iterates (training.ema), which task.finish releases.
        opt = task.optimizer(ensemble)
        for X, y, valid in task.minibatches():
            opt.zero_grad(set_to_none=True)
            smoothed_loss(ensemble(X), y, valid, self.params.smoothing).backward()
            opt.step()
        return task.finish(ensemble, opt)  # no claim: this defense promises no (ε, δ)


@hookimpl
def register_defenses(register) -> None:  # noqa: ANN001 - the registry's callback
    register(LabelSmoothing)
