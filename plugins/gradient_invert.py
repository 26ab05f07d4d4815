"""Optimisation-based gradient inversion: dummy records (and labels) fitted so that their update matches the
shared one, every restart at once.

The objective of restart r is the distance between the update its dummy batch would produce
(``Functional.update``: one gradient, or the client's S local steps simulated) and the shared one, squared
Euclidean (DLG, iDLG) or one minus their cosine similarity over all parameters (Inverting Gradients), plus ``tv``
times the records' total variation. ``torch.func`` gives the gradient of that objective in the records (a gradient
of a gradient). Two optimisers:

* ``adam`` (Inverting Gradients): every restart in one ``vmap``, Adam stepping them together (elementwise, so
  restarts stay independent), optionally with step decay and the records boxed to the data's range;
* ``lbfgs`` (DLG, iDLG, as their papers optimise): ``torch.optim.LBFGS`` with a fixed step and no line search,
  as Zhu et al.'s code runs it, one restart after another (L-BFGS's curvature pairs would couple restarts run as
  one vector); ``iterations`` counts its iterations, one objective evaluation each. On the ReLU networks here a
  strong-Wolfe line search stalled after 13–62 iterations at a far worse fit (a piecewise-smooth objective).

The restart with the smallest final objective is returned.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch.func import grad_and_value, vmap

from arena import GradientsView
from arena_plugins.gradient_inversion import Functional, Params, total_variation

DECAY_AT = (3 / 8, 5 / 8, 7 / 8)
"""Inverting Gradients' step decay: the learning rate is divided by 10 at these fractions of the iterations."""


Optimiser = Literal["adam", "lbfgs"]


def invert(f: Functional, update: Params, view: GradientsView, *, labels: torch.Tensor | None,
           distance: Literal["l2", "cosine"], iterations: int, lr: float, restarts: int, tv: float, boxed: bool,
           decay: bool, optimiser: Optimiser = "adam") -> tuple[torch.Tensor, torch.Tensor]:
    """(records [n_records, n_features], labels [n_records]) of the best restart; ``labels`` None: learnt as soft
    labels with the records (DLG), else held fixed. ``lbfgs`` neither boxes nor decays (the papers' DLG does
    neither)."""
    N, C, d = view.n_records, f.n_classes, view.n_features
    dtype = next(iter(f.params.values())).dtype
    gen = torch.Generator().manual_seed(int(view.seed) % (1 << 63))
    lo, hi = (float(v) for v in view.data_range)
    X = (lo + (hi - lo) * torch.rand(restarts, N, d, generator=gen, dtype=dtype)).requires_grad_()
    Z = torch.randn(restarts, N, C, generator=gen, dtype=dtype).requires_grad_()
    fixed = None if labels is None else torch.nn.functional.one_hot(labels.long(), C).to(dtype)
    target = {k: v.to(dtype) for k, v in update.items()}
    target_norm = torch.sqrt(sum(t.pow(2).sum() for t in target.values()))

    def objective(x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        soft = torch.softmax(z, -1) if fixed is None else fixed
        g = f.update(x, soft)
        if distance == "l2":
            dist = sum(((g[k] - target[k]) ** 2).sum() for k in target)
        else:
            dot = sum((g[k] * target[k]).sum() for k in target)
            norm = torch.sqrt(sum(g[k].pow(2).sum() for k in target))
            dist = 1.0 - dot / (norm * target_norm + 1e-12)
        return dist + tv * total_variation(x, f.shape)

    torch.set_flush_denormal(True)  # near an exact match the gradients turn subnormal: 30x slower on x86 otherwise
    try:
        if optimiser == "lbfgs":
            return _lbfgs(objective, X.detach(), Z.detach(), fixed, labels, iterations=iterations, lr=lr)
        step = vmap(grad_and_value(objective, argnums=(0, 1)))
        return _descend(step, X, Z, fixed, labels, iterations=iterations, lr=lr, boxed=boxed, decay=decay,
                        bounds=(lo, hi))
    finally:
        torch.set_flush_denormal(False)


def _descend(step, X: torch.Tensor, Z: torch.Tensor, fixed: torch.Tensor | None,  # noqa: ANN001 - a vmapped fn
             labels: torch.Tensor | None, *, iterations: int, lr: float, boxed: bool, decay: bool,
             bounds: tuple[float, float]) -> tuple[torch.Tensor, torch.Tensor]:
    """Adam on every restart's records (and soft labels when ``fixed`` is None); the best restart's result."""
    lo, hi = bounds
    optimiser = torch.optim.Adam([X, Z] if fixed is None else [X], lr=lr)
    milestones = [int(a * iterations) for a in DECAY_AT] if decay else []
    schedule = torch.optim.lr_scheduler.MultiStepLR(optimiser, milestones=milestones, gamma=0.1)
    for _ in range(iterations):
        (gx, gz), _value = step(X.detach(), Z.detach())
        X.grad, Z.grad = gx, gz
        optimiser.step()
        schedule.step()
        if boxed:
            with torch.no_grad():
                X.clamp_(lo, hi)
    with torch.no_grad():
        _, value = step(X.detach(), Z.detach())
    best = int(torch.nan_to_num(value, nan=float("inf")).argmin())
    found = Z[best].argmax(-1) if fixed is None else labels
    assert found is not None
    return X[best].detach(), found.detach()


def _lbfgs(objective, X: torch.Tensor, Z: torch.Tensor, fixed: torch.Tensor | None,  # noqa: ANN001 - a fn of (x, z)
           labels: torch.Tensor | None, *, iterations: int, lr: float) -> tuple[torch.Tensor, torch.Tensor]:
    """L-BFGS for ``iterations`` iterations (one objective evaluation each: fixed step ``lr``, no line search) on
    each restart's records, and soft labels when ``fixed`` is None, as one flat vector; the restart with the
    smallest final objective (a restart that diverged to NaN never wins)."""
    value_and_grads = grad_and_value(objective, argnums=(0, 1))
    n_x = X[0].numel()

    def split(flat: torch.Tensor, z0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return flat[:n_x].reshape(X[0].shape), flat[n_x:].reshape(z0.shape) if fixed is None else z0

    best: tuple[float, torch.Tensor, torch.Tensor] = (float("inf"), X[0], Z[0])
    for x0, z0 in zip(X, Z):
        v = (x0.reshape(-1).clone() if fixed is not None else torch.cat([x0.reshape(-1), z0.reshape(-1)]))
        v.requires_grad_()

        def closure() -> torch.Tensor:
            (gx, gz), value = value_and_grads(*split(v.detach(), z0))  # noqa: B023 - called within this iteration
            v.grad = gx.reshape(-1) if fixed is not None else torch.cat([gx.reshape(-1), gz.reshape(-1)])  # noqa: B023
            return value

        torch.optim.LBFGS([v], lr=lr, max_iter=iterations, max_eval=iterations, history_size=100,
                          tolerance_grad=1e-12, tolerance_change=1e-14).step(closure)
        with torch.no_grad():
            x, z = split(v.detach(), z0)
            value = float(objective(x, z))
        if value < best[0]:
            best = (value, x, z)
    _, x, z = best
    found = z.argmax(-1) if fixed is None else labels
    assert found is not None
    return x.detach(), found.detach()
