"""A federated client's update, and the contract of the defenses that act on it.

The client holds a batch of B records and the global model θ₀. It takes ``steps`` full-batch gradient steps of
size ``lr`` on the mean cross-entropy (one step: FedSGD; several: FedAvg's local training) and shares the
*pseudo-gradient* (θ₀ − θ_S)/lr, which is the plain gradient at θ₀ when S = 1. An ``UpdateDefense`` changes what is
shared: the per-example gradients of each local step (DP-SGD at the client: clip each, add Gaussian noise), the
finished pseudo-gradient (top-k pruning, quantisation, per-client clipping and noise), or how many clients' updates
the server sees summed (secure aggregation). Everything is functional (``torch.func``), in the module's train mode.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch.func import functional_call, grad, vmap

from arena.contracts.defense import Claim, Defense, Fit, FitTask
from arena.engine.trainer import train

Params = dict[str, torch.Tensor]


class UpdateDefense(Defense):
    """A defense of a federated client's update (the ``gradients`` game's defenses).

    Its ``fit`` trains the global model before the attacked round without protection (that model comes from
    records disjoint from every client batch the game draws, so it says nothing about them). The hooks below act
    on the attacked round; each default leaves the update as it is.
    """

    per_example: ClassVar[bool] = False
    """True: each local step's gradient is ``local_gradient`` of the per-example gradients (DP-SGD at the
    client); False: the plain mean gradient."""

    def fit(self, task: FitTask) -> Fit:
        return Fit(train(task.arch, task.X, task.y, task.recipe, task.init_seeds, task.train_seeds), None)

    def clients(self) -> int:
        """How many clients' updates the server sees summed (secure aggregation); 1: the client's own."""
        return 1

    def local_gradient(self, per_example: Params, generator: torch.Generator) -> Params:
        """One local step's gradient from the per-example gradients [B, ...] (only when ``per_example``)."""
        return {k: g.mean(0) for k, g in per_example.items()}

    def shared(self, update: Params, generator: torch.Generator) -> Params:
        """What the client sends, given its pseudo-gradient."""
        return update

    def update_claim(self, batch_size: int, steps: int) -> Claim | None:
        """The privacy claim covering one client's shared update (a batch of ``batch_size``, ``steps`` local
        steps), for each record of the batch; None: none."""
        return None


def trainable(module: torch.nn.Module) -> tuple[Params, Params]:
    """(trainable parameters, other tensors) of ``module``, detached, by name."""
    params = {k: v.detach() for k, v in module.named_parameters() if v.requires_grad}
    others = {k: v.detach() for k, v in module.named_buffers()}
    others.update({k: v.detach() for k, v in module.named_parameters() if not v.requires_grad})
    return params, others


def mean_loss(module: torch.nn.Module, params: Params, others: Params, X: torch.Tensor,
              y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of ``module`` with ``params`` on the batch (X [B, *input_shape], y [B])."""
    logits = functional_call(module, {**params, **others}, (X,))
    return torch.nn.functional.cross_entropy(logits, y)


def batch_gradient(module: torch.nn.Module, params: Params, others: Params, X: torch.Tensor,
                   y: torch.Tensor) -> Params:
    """∇θ of the mean cross-entropy on the batch."""
    return grad(lambda p: mean_loss(module, p, others, X, y))(params)


def per_example_gradients(module: torch.nn.Module, params: Params, others: Params, X: torch.Tensor,
                          y: torch.Tensor) -> Params:
    """∇θ of each record's cross-entropy, stacked [B, ...] (vmap over the batch)."""
    def one(p: Params, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return mean_loss(module, p, others, x[None], t[None])

    return vmap(grad(one), in_dims=(None, 0, 0))(params, X, y)


def client_update(module: torch.nn.Module, X: torch.Tensor, y: torch.Tensor, *, steps: int, lr: float,
                  defense: Defense, generator: torch.Generator) -> Params:
    """The pseudo-gradient (θ₀ − θ_S)/lr a client with batch (X, y) shares after ``steps`` local steps from the
    module's parameters θ₀, under ``defense`` (an ``UpdateDefense``; any other defense shares the raw update)."""
    params0, others = trainable(module)
    params = dict(params0)
    protect = defense if isinstance(defense, UpdateDefense) else None
    for _ in range(steps):
        if protect is not None and protect.per_example:
            g = protect.local_gradient(per_example_gradients(module, params, others, X, y), generator)
        else:
            g = batch_gradient(module, params, others, X, y)
        params = {k: params[k] - lr * g[k] for k in params}
    update = {k: (params0[k] - params[k]) / lr for k in params} if steps > 1 else g
    return protect.shared(update, generator) if protect is not None else update


def flatten(update: Params) -> torch.Tensor:
    """The update's tensors as one vector, in their order."""
    return torch.cat([t.reshape(-1) for t in update.values()])


def unflatten(vector: torch.Tensor, like: Params) -> Params:
    """The inverse of ``flatten`` for tensors shaped as ``like``."""
    out, start = {}, 0
    for k, t in like.items():
        out[k] = vector[start : start + t.numel()].reshape(t.shape)
        start += t.numel()
    return out
