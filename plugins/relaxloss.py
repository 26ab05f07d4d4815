"""RelaxLoss (Chen, Yu & Fritz, ICLR 2022), written in plain PyTorch on the defense API: ordinary autograd on
``task.ensemble()``, batches from ``task.minibatches()`` (the recipe's epochs, batch size and augmentation), the
recipe's optimiser from ``task.optimizer()`` (learning rate, momentum, ``model.l2`` as weight decay on weights,
the moving average of ``training.ema``, released by ``task.finish()``). It trains by gradient steps, so it
honours every recipe field but ``solver`` (a track asking for ``newton`` is refused when validated).

Algorithm 1 of the paper, per mini-batch B and per model, with L the mean cross-entropy on B and α the target
loss level:
  - L ≥ α: gradient descent on L;
  - L < α, even epoch: gradient ascent on L (the loss climbs back towards α from below);
  - L < α, odd epoch: posterior flattening: soft labels t̃ keep the predicted true-class probability p_y and
    spread the rest uniformly, t̃_c = (1 - p_y)/(C - 1) for c ≠ y (t̃ is a constant, no gradient through it);
    descend on the soft-label cross-entropy -Σ_c t̃_c log p_c, averaged over the batch, counting only the
    examples the model classifies correctly (the others contribute zero). Its gradient in the logits is
    p - t̃: nothing on the true class, the other classes pulled to a flat posterior.
(The authors' CIFAR code adds an ascent term and gates the soft loss on misclassified examples instead; their
non-image code applies it to every example. We follow the paper's algorithm with the correct-only gate.)
The K models are independent: each model's α test is its own, taken by masks, and the summed loss gives each
model its own gradient. Claims no privacy guarantee.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from pydantic import Field

from arena import RECIPE_FIELDS, Defense, Fit, FitTask, PluginParams, hookimpl


class RelaxLossParams(PluginParams):
    alpha: float = Field(gt=0.0, allow_inf_nan=False, description="target mean training loss α (> 0)")


def relaxloss_objective(logits: torch.Tensor, y: torch.Tensor, valid: torch.Tensor | None, alpha: float,
                        epoch: int) -> torch.Tensor:
    """The sum over models of each model's RelaxLoss objective for logits [K, B, C], labels [K, B]."""
    K, B, C = logits.shape
    weight = torch.ones(K, B, dtype=logits.dtype, device=logits.device) if valid is None else valid.to(logits.dtype)
    count = weight.sum(dim=1).clamp_min(1.0)
    log_p = F.log_softmax(logits, dim=-1)
    ce = -log_p.gather(-1, y.unsqueeze(-1)).squeeze(-1)  # [K, B]
    loss = (ce * weight).sum(dim=1) / count  # [K] mean batch loss of each model
    if epoch % 2 == 0:
        relaxed = -loss  # gradient ascent
    else:
        with torch.no_grad():
            p_y = log_p.gather(-1, y.unsqueeze(-1)).exp()
            soft = ((1.0 - p_y) / (C - 1)).expand(K, B, C).scatter(-1, y.unsqueeze(-1), p_y)
            correct = (logits.argmax(dim=-1) == y).to(logits.dtype) * weight
        flat = -(soft * log_p).sum(dim=-1)  # [K, B] soft-label cross-entropy
        relaxed = (flat * correct).sum(dim=1) / count
    return torch.where(loss.detach() >= alpha, loss, relaxed).sum()


class RelaxLoss(Defense):
    """RelaxLoss: hold the members' mean loss near α instead of driving it to zero (Chen et al. 2022)."""

    name = "relaxloss"
    Params = RelaxLossParams
    params: RelaxLossParams
    honours = RECIPE_FIELDS - {"solver"}

    def fit(self, task: FitTask) -> Fit:
        if task.solver == "newton":
            raise ValueError("relaxloss trains by gradient steps; solver 'newton' does not apply")
        ensemble = task.ensemble()
        opt = task.optimizer(ensemble)
        batch = task.recipe.batch_size
        per_epoch = 1 if batch is None or batch >= task.n else math.ceil(task.n / batch)
        for step, (X, y, valid) in enumerate(task.minibatches()):
            opt.zero_grad(set_to_none=True)
            relaxloss_objective(ensemble(X), y, valid, self.params.alpha, step // per_epoch).backward()
            opt.step()
        return task.finish(ensemble, opt)


@hookimpl
def register_defenses(register) -> None:  # noqa: ANN001
    register(RelaxLoss)
