"""A defense plugin in plain PyTorch: label smoothing (Szegedy et al. 2016), which trains on the soft targets
(1 - s)·onehot(y) + s/C and so keeps the members' loss from falling to zero. It claims no privacy guarantee.

Scenario files name it ``defenses: [{name: example-label-smoothing, smoothing: 0.2}]``. ``fit`` receives a
``FitTask`` holding K training sets at once and trains K models on it with ordinary autograd and ``torch.optim``:
``task.ensemble()`` is one ``nn.Module`` holding the K seeded models (logits [K, B, C] for inputs [K, B, ...]),
``task.minibatches()`` the recipe's batches, ``Fit.of(ensemble)`` the result.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field

from arena import Defense, Fit, FitTask, PluginParams, hookimpl


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
    """Non-private training on label-smoothed targets, with the track's recipe (epochs, lr, momentum, batches)."""

    name = "example-label-smoothing"
    version = "1"
    Params = LabelSmoothingParams
    params: LabelSmoothingParams

    def fit(self, task: FitTask) -> Fit:
        recipe = task.recipe
        if task.solver == "newton":
            raise ValueError(f"{self.name} trains by gradient steps; solver 'newton' does not apply")
        if recipe.ema:
            raise ValueError(f"{self.name} releases the last iterate; training.ema must be 0")
        ensemble = task.ensemble()
        # The model's l2 penalty covers its weight tensors, not its biases or norm scales: two parameter groups.
        penalised = {id(p) for p in ensemble.penalised()}
        trainable = [p for p in ensemble.parameters() if p.requires_grad]
        groups = [{"params": [p for p in trainable if id(p) in penalised], "weight_decay": task.arch.l2},
                  {"params": [p for p in trainable if id(p) not in penalised], "weight_decay": 0.0}]
        opt = torch.optim.SGD([g for g in groups if g["params"]], lr=recipe.lr, momentum=recipe.momentum)
        for X, y, valid in task.minibatches():
            opt.zero_grad(set_to_none=True)
            smoothed_loss(ensemble(X), y, valid, self.params.smoothing).backward()
            opt.step()
        return Fit.of(ensemble)  # no claim: this defense promises no (ε, δ)


@hookimpl
def register_defenses(register) -> None:  # noqa: ANN001 - the registry's callback
    register(LabelSmoothing)
