"""What the gradient-inversion attacks share: the model as a function, the update an attack matches, label
recovery from the output layer's gradient, and reading a first linear layer.

The shared update is the sum over ``clients`` of each client's pseudo-gradient (the mean over its B records when
it takes one step), so ``update / clients`` is the mean gradient over the ``n_records`` records of the update: a
dummy batch of ``n_records`` records is matched against it.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from arena import GradientsView

Params = dict[str, torch.Tensor]


class Functional:
    """The view's global model θ₀ as a function of its parameters (train mode, as the client trained it)."""

    def __init__(self, view: GradientsView) -> None:
        self.module = view.model.module(0, train=True)
        self.params = {k: v.detach() for k, v in self.module.named_parameters() if v.requires_grad}
        self.others = {k: v.detach() for k, v in self.module.named_buffers()}
        self.shape = tuple(view.model.input_shape)
        self.steps, self.lr = view.local_steps, view.client_lr
        self.n_classes = view.n_classes

    def to(self, dtype: torch.dtype) -> Functional:
        """The same function in ``dtype`` (parameters, floating buffers and module), in place; returns itself."""
        self.module = self.module.to(dtype)
        self.params = {k: v.to(dtype) for k, v in self.params.items()}
        self.others = {k: v.to(dtype) if v.is_floating_point() else v for k, v in self.others.items()}
        return self

    def logits(self, params: Params, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.module, {**params, **self.others}, (x.reshape(-1, *self.shape),))

    def loss(self, params: Params, x: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy against soft labels ``soft`` [N, C] (one-hot rows: the ordinary loss)."""
        return -(soft * torch.log_softmax(self.logits(params, x), dim=-1)).sum(-1).mean()

    def update(self, x: torch.Tensor, soft: torch.Tensor) -> Params:
        """The pseudo-gradient a client with records x and labels ``soft`` would share: the gradient at θ₀ for one
        local step, (θ₀ − θ_S)/lr after S full-batch steps."""
        g = grad(self.loss)(self.params, x, soft)
        if self.steps == 1:
            return g
        p = {k: self.params[k] - self.lr * g[k] for k in self.params}
        for _ in range(self.steps - 1):
            g = grad(self.loss)(p, x, soft)
            p = {k: p[k] - self.lr * g[k] for k in p}
        return {k: (self.params[k] - p[k]) / self.lr for k in p}

    def per_example(self, x: torch.Tensor, y: torch.Tensor) -> Params:
        """Each record's gradient at θ₀, [n, ...]."""
        onehot = nn.functional.one_hot(y, self.n_classes).to(x.dtype)

        def one(xi: torch.Tensor, yi: torch.Tensor) -> Params:
            return grad(self.loss)(self.params, xi[None], yi[None])

        return vmap(one)(x, onehot)


def target_update(view: GradientsView) -> Params:
    """The mean gradient over the update's records: the shared sum divided by the clients."""
    return {k: v.detach() / view.clients for k, v in view.update.items()}


def output_layer(f: Functional) -> tuple[str, str | None]:
    """(name of the output layer's weight [C, h], name of its bias [C] or None): the last 2-D parameter whose first
    dimension is the class count."""
    names = list(f.params)
    for i in range(len(names) - 1, -1, -1):
        t = f.params[names[i]]
        if t.ndim == 2 and t.shape[0] == f.n_classes:
            bias = names[i + 1] if i + 1 < len(names) and f.params[names[i + 1]].shape == (f.n_classes,) else None
            return names[i], bias
    raise ValueError("the model has no dense output layer to read labels from")


def largest_remainder(counts: torch.Tensor, total: int) -> torch.Tensor:
    """Non-negative integer counts summing to ``total``, proportional to ``counts`` (largest remainder)."""
    c = counts.clamp(min=0).to(torch.float64)
    c = c * total / c.sum() if c.sum() > 0 else torch.full_like(c, total / len(c))
    base = c.floor().long()
    rest = total - int(base.sum())
    base[torch.argsort(c - base, descending=True)[:rest]] += 1
    return base


def recover_labels(view: GradientsView, f: Functional, update: Params) -> torch.Tensor:
    """The labels of the update's ``n_records`` records (sorted): the game's when it told them; else, for one record,
    iDLG's rule (Zhao et al. 2020): the output bias's gradient p − onehot(y) is negative at y alone (without a bias,
    the row of the output weight's gradient with the negative sum, for non-negative activations); for more, the
    counts N·(p̄_c − ∇b_c) (Geng et al. 2021), p̄ the model's mean prediction on the population when granted."""
    if view.labels is not None:
        return torch.sort(view.labels.long()).values
    N = view.n_records
    weight, bias = output_layer(f)
    g = update[bias] if bias is not None else update[weight].sum(1)
    if N == 1:
        return g.argmin().reshape(1)
    try:
        population = view.population_X
        with torch.no_grad():
            p_bar = torch.softmax(f.logits(f.params, population.to(g.dtype)), -1).mean(0)
    except AttributeError:  # ThreatModelError: no population granted
        p_bar = torch.full((f.n_classes,), 1.0 / f.n_classes, dtype=g.dtype)
    counts = largest_remainder(N * (p_bar - g), N)
    return torch.repeat_interleave(torch.arange(f.n_classes), counts)


def first_linear(f: Functional, n_features: int) -> tuple[str, str]:
    """(weight name, bias name) of the first ``nn.Linear`` with a bias that reads the flat record; a ValueError when
    the model has none (its first layer is a convolution, or has no bias)."""
    for name, m in f.module.named_modules():
        if isinstance(m, nn.Linear):
            if m.in_features != n_features or m.bias is None:
                break
            return f"{name}.weight", f"{name}.bias"
        if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
            break
    raise ValueError("the analytic recovery needs a first linear layer with a bias reading the record")


def rows_solve(gW: torch.Tensor, gb: torch.Tensor) -> torch.Tensor:
    """x minimising Σ_i ||∇W_i − ∇b_i x||² over the layer's rows: (Σ ∇b_i ∇W_i)/(Σ ∇b_i²); exactly the record when
    one record made the gradient (∇W_i = ∇b_i x for every row i)."""
    gW, gb = gW.to(torch.float64), gb.to(torch.float64)
    return (gb @ gW) / (gb @ gb).clamp(min=1e-300)


def total_variation(x: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """Mean absolute difference of neighbouring pixels (images [..., C, H, W]); 0 for other records."""
    if len(shape) != 3:
        return x.new_zeros(())
    img = x.reshape(-1, *shape)
    return (img[..., 1:, :] - img[..., :-1, :]).abs().mean() + (img[..., :, 1:] - img[..., :, :-1]).abs().mean()


def clamp_range(x: torch.Tensor, view: GradientsView) -> torch.Tensor:
    lo, hi = view.data_range
    return x.clamp(float(lo), float(hi))


def flat_norm(update: Params) -> float:
    return math.sqrt(sum(float(t.pow(2).sum()) for t in update.values()))
