"""Output perturbation for L2-regularised softmax regression (Chaudhuri, Monteleoni & Sarwate 2011, Alg. 1).

The mechanism: bound every feature vector's norm, fit the regularised optimum exactly, add Laplace noise
calibrated to how far one record can move that optimum. Two details make the claim honest here:

* The intercept is penalised too. The track's objective leaves it free, but an unpenalised coordinate has no
  sensitivity bound (it can move arbitrarily when one record is added), so the fit uses the feature vector
  x̃ = [x, 1] and penalises the whole θ = [W; b] ∈ R^{(d+1)×C}: mean CE + (λ/2)||θ||²_F.
* Add/remove neighbours, mean loss. With F_D the objective on n records and θ_D its optimum, n F_D and
  (n+1) F_{D∪{z}} differ by h = ℓ_z + (λ/2)||θ||²; (n+1) F_{D∪{z}} is (n+1)λ-strongly convex, so
  ||θ_D - θ_{D∪{z}}||₂ <= ||∇ℓ_z(θ_D) + λθ_D|| / ((n+1)λ) <= 2L / ((n+1)λ), using ||λθ_D|| <= L from
  stationarity. Here L bounds ||∇ℓ||_F = ||x̃|| ||softmax - onehot||₂ <= sqrt(2) sqrt(R² + 1). A model trained on
  N records may have a neighbour with N - 1, so the bound used is Δ₂ = 2L / (Nλ).

The solver stops at gradient norm <= tol, which puts the released point within tol/λ of the exact optimum;
2 tol/λ is added to Δ₂. Laplace noise per coordinate needs an L1 sensitivity: Δ₁ = sqrt(P) Δ₂ for the
P = (d+1) C coordinates of θ (every class vector at once, not per class), so the release is ε-DP.
"""

import math

import torch

_ARMIJO = 1e-4
_MAX_HALVINGS = 50


def clip_rows(X: torch.Tensor, bound: float) -> torch.Tensor:
    """Each row x scaled by min(1, bound / ||x||), so that no feature vector is longer than ``bound``."""
    norms = X.norm(dim=-1, keepdim=True)
    return X * (bound / norms.clamp(min=bound)).to(X.dtype)


def with_constant(X: torch.Tensor) -> torch.Tensor:
    """[..., d+1]: X with a trailing 1, so the intercept is the last row of θ."""
    return torch.cat([X, torch.ones_like(X[..., :1])], dim=-1)


def l2_sensitivity(n: int, l2: float, feature_bound: float, tol: float) -> float:
    """Δ₂ of the released θ for a training set of n records (see the module docstring)."""
    if n < 1 or not l2 > 0 or not feature_bound > 0 or tol < 0:
        raise ValueError("need n >= 1, l2 > 0, feature_bound > 0 and tol >= 0")
    lipschitz = math.sqrt(2.0) * math.sqrt(feature_bound**2 + 1.0)
    return 2.0 * lipschitz / (n * l2) + 2.0 * tol / l2


def _objective(X: torch.Tensor, Y: torch.Tensor, theta: torch.Tensor, l2: float) -> torch.Tensor:
    logits = torch.bmm(X, theta)
    ce = (torch.logsumexp(logits, -1) - (logits * Y).sum(-1)).mean(1)
    return ce + 0.5 * l2 * (theta**2).sum((1, 2))


def _gradient(X: torch.Tensor, Y: torch.Tensor, theta: torch.Tensor, l2: float) -> torch.Tensor:
    P = torch.softmax(torch.bmm(X, theta), -1)
    return torch.bmm(X.transpose(1, 2), P - Y) / X.shape[1] + l2 * theta


def _hessian(X: torch.Tensor, theta: torch.Tensor, l2: float) -> torch.Tensor:
    """[K, DC, DC]: (1/n) Σ_i x_i x_iᵀ ⊗ (diag p_i - p_i p_iᵀ) + λI, rows ordered (feature, class)."""
    K, n, D = X.shape
    P = torch.softmax(torch.bmm(X, theta), -1)
    C = P.shape[-1]
    G = (X.unsqueeze(-1) * P.unsqueeze(-2)).reshape(K, n, D * C)
    H = torch.bmm(G.transpose(1, 2), G).mul_(-1.0 / n)
    # the diag p_i part only couples equal classes: add it on the (class, class) diagonal of each feature block
    H.view(K, D, C, D, C).diagonal(dim1=2, dim2=4).add_(torch.einsum("kia,kib,kic->kabc", X, X, P), alpha=1.0 / n)
    H.diagonal(dim1=1, dim2=2).add_(l2)
    return H


def fit_penalised(
    X: torch.Tensor, y: torch.Tensor, n_classes: int, l2: float, tol: float = 1e-10, max_iter: int = 100
) -> torch.Tensor:
    """θ [K, D, C] minimising mean CE(Xθ) + (λ/2)||θ||² for each of K problems X [K, n, D], y [K, n] (float64).

    Damped Newton with Armijo backtracking; every coordinate is penalised, so the problem is λ-strongly
    convex and the optimum unique. Raises RuntimeError unless every gradient norm ends <= tol.
    """
    if not l2 > 0:
        raise ValueError("the fully penalised objective needs l2 > 0")
    X = X.to(torch.float64)
    Y = torch.nn.functional.one_hot(y, n_classes).to(X.dtype)
    K, _, D = X.shape
    theta = torch.zeros(K, D, n_classes, dtype=X.dtype, device=X.device)
    for _ in range(max_iter):
        g = _gradient(X, Y, theta, l2)
        active = g.flatten(1).norm(dim=1) > tol
        if not active.any():
            return theta
        chol = torch.linalg.cholesky(_hessian(X, theta, l2))  # H >= λI: symmetric positive definite
        step = torch.cholesky_solve(g.reshape(K, -1, 1), chol).reshape(g.shape)
        f0 = _objective(X, Y, theta, l2)
        decrease = _ARMIJO * (g * step).sum((1, 2))
        slack = 1e-13 * (1.0 + f0.abs())
        t = torch.ones(K, dtype=X.dtype, device=X.device)
        for _ in range(_MAX_HALVINGS):
            ok = _objective(X, Y, theta - t[:, None, None] * step, l2) <= f0 - t * decrease + slack
            if ok.all():
                break
            t = torch.where(ok, t, t / 2)
        theta = torch.where(active[:, None, None], theta - t[:, None, None] * step, theta)
    norms = _gradient(X, Y, theta, l2).flatten(1).norm(dim=1)
    raise RuntimeError(
        f"Newton did not converge in {max_iter} iterations: gradient norms up to {norms.max().item():.3g} > tol={tol:g}"
    )
