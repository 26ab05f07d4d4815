"""Exact batched multinomial logistic regression by damped Newton (IRLS), for K problems at once.

Objective per model: mean cross-entropy + (l2/2)||W||^2 with an unpenalised intercept (or, for output
perturbation, with the intercept penalised too). Used where attacks and tests need the true optimum rather than
an SGD approximation.
"""

import torch

from arena.engine.dense import Layers, softmax

_ARMIJO = 1e-4
_MAX_HALVINGS = 50


def design(X: torch.Tensor) -> torch.Tensor:
    """[K, n, d+1]: X with a column of ones, so that theta = [W; b] is [K, d+1, C]."""
    return torch.cat([X, torch.ones_like(X[..., :1])], dim=-1)


def _penalised(theta: torch.Tensor, intercept: bool) -> torch.Tensor:
    """The rows of theta that the L2 term covers: W only, or W and the intercept."""
    return theta if intercept else theta[:, :-1]


def _objective(
    Xt: torch.Tensor, Y: torch.Tensor, theta: torch.Tensor, l2: float, intercept: bool = False
) -> torch.Tensor:
    """[K] mean cross-entropy + (l2/2)||W||^2 (+ the intercept's square when ``intercept``) for one-hot Y."""
    logits = torch.bmm(Xt, theta)
    ce = (torch.logsumexp(logits, -1) - (logits * Y).sum(-1)).mean(1)
    return ce + 0.5 * l2 * (_penalised(theta, intercept) ** 2).sum((1, 2))


def _gradient(
    Xt: torch.Tensor, Y: torch.Tensor, theta: torch.Tensor, l2: float, intercept: bool = False
) -> torch.Tensor:
    """[K, d+1, C] gradient of `_objective`."""
    P = softmax(torch.bmm(Xt, theta))
    g = torch.bmm(Xt.transpose(1, 2), P - Y) / Xt.shape[1]
    _penalised(g, intercept).add_(l2 * _penalised(theta, intercept))
    return g


def _hessian(Xt: torch.Tensor, theta: torch.Tensor, l2: float, intercept: bool = False) -> torch.Tensor:
    """[K, DC, DC] Hessian, (1/n) sum_i x_i x_i^T (x) (diag p_i - p_i p_i^T) + l2 on W entries.

    Block (c, c') is X^T diag(p_c (delta_cc' - p_c')) X / n. The blocks are symmetric in (c, c') and each
    row of blocks sums to zero (the softmax is invariant to shifting every class), so only the pairs
    c <= c' < C-1 are computed, one bmm for all of them: C(C-1)/2 blocks instead of C(C+1) (6x fewer for C=2).
    Adds I_D (x) 11^T/C, which only acts on the softmax's null directions (shifting every class
    by the same amount), making H invertible without changing Newton steps orthogonal to them.
    """
    K, n, D = Xt.shape
    P = softmax(torch.bmm(Xt, theta))
    C = P.shape[-1]
    r, s = torch.triu_indices(C - 1, C - 1, device=Xt.device)
    w = P[..., r] * ((r == s).to(P.dtype) - P[..., s])  # [K, n, pairs]
    pairs = torch.bmm(Xt.transpose(1, 2), (Xt.unsqueeze(-1) * w.unsqueeze(-2)).reshape(K, n, -1))
    pairs = pairs.reshape(K, D, D, -1).permute(0, 3, 1, 2) / n  # [K, pairs, D, D]
    B = Xt.new_zeros(K, C, C, D, D)
    B[:, r, s] = pairs
    B[:, s, r] = pairs
    B[:, :-1, -1] = -B[:, :-1, :-1].sum(2)
    B[:, -1] = -B[:, :-1].sum(1)
    if not intercept:  # with the intercept penalised, H >= l2*I and there is no null direction to fix
        B.diagonal(dim1=3, dim2=4).add_(1.0 / C)  # the null-direction term, on each feature's (d, d) entries
    diagonal = B.diagonal(dim1=1, dim2=2).diagonal(dim1=1, dim2=2)  # [K, C, D]
    (diagonal if intercept else diagonal[..., :-1]).add_(l2)
    return B.permute(0, 3, 1, 4, 2).reshape(K, D * C, D * C)


def gradient(X: torch.Tensor, y: torch.Tensor, params: Layers, l2: float) -> Layers:
    """[dW [K,d,C], db [K,C]]: gradient of mean CE + (l2/2)||W||^2 at params = [W, b]."""
    W, b = params
    theta = torch.cat([W, b.unsqueeze(1)], dim=1)
    Y = torch.nn.functional.one_hot(y, W.shape[-1]).to(W.dtype)
    g = _gradient(design(X.to(W.dtype)), Y, theta, l2)
    return [g[:, :-1], g[:, -1]]


def fit_logreg(
    X: torch.Tensor,
    y: torch.Tensor,
    n_classes: int,
    l2: float,
    tol: float = 1e-10,
    max_iter: int = 100,
) -> Layers:
    """Minimise the objective for each of K problems X [K,n,d], y [K,n] in float64.

    Returns [W [K,d,C], b [K,C]] (b centred) once every model's gradient norm is <= tol; raises
    RuntimeError otherwise. Line search (Armijo) makes it safe for weak regularisation.
    """
    Xt = design(X.to(torch.float64))
    Y = torch.nn.functional.one_hot(y, n_classes).to(Xt.dtype)
    theta = solve(Xt, Y, l2, intercept=False, tol=tol, max_iter=max_iter)
    return [theta[:, :-1].clone(), theta[:, -1] - theta[:, -1].mean(-1, keepdim=True)]


def solve(
    Xt: torch.Tensor, Y: torch.Tensor, l2: float, *, intercept: bool, tol: float, max_iter: int
) -> torch.Tensor:
    """theta [K, D, C] with gradient norm <= tol for every model: damped Newton with Armijo backtracking.

    ``Xt`` carries the constant column last; ``intercept`` says whether the L2 term covers it.
    Raises RuntimeError, naming the worst gradient norm, when some model has not converged.
    """
    K, _, D = Xt.shape
    theta = torch.zeros(K, D, Y.shape[-1], dtype=Xt.dtype, device=Xt.device)
    for _ in range(max_iter):
        g = _gradient(Xt, Y, theta, l2, intercept)
        active = g.flatten(1).norm(dim=1) > tol
        if not active.any():
            return theta
        step = torch.linalg.solve(_hessian(Xt, theta, l2, intercept), g.reshape(K, -1)).reshape(g.shape)
        f0 = _objective(Xt, Y, theta, l2, intercept)
        decrease = _ARMIJO * (g * step).sum((1, 2))
        slack = 1e-13 * (1.0 + f0.abs())
        t = torch.ones(K, dtype=Xt.dtype, device=Xt.device)
        for _ in range(_MAX_HALVINGS):
            ok = _objective(Xt, Y, theta - t[:, None, None] * step, l2, intercept) <= f0 - t * decrease + slack
            if ok.all():
                break
            t = torch.where(ok, t, t / 2)
        theta = torch.where(active[:, None, None], theta - t[:, None, None] * step, theta)
    norms = _gradient(Xt, Y, theta, l2, intercept).flatten(1).norm(dim=1)
    raise RuntimeError(
        f"Newton did not converge in {max_iter} iterations: gradient norms up to "
        f"{norms.max().item():.3g} > tol={tol:g} for {int((norms > tol).sum())} of {K} models"
    )
