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

from arena.engine.newton import solve


def clip_rows(X: torch.Tensor, bound: float) -> torch.Tensor:
    """Each row x scaled by min(1, bound / ||x||), so that no feature vector is longer than ``bound``."""
    norms = X.norm(dim=-1, keepdim=True)
    return X * (bound / norms.clamp(min=bound)).to(X.dtype)


def l2_sensitivity(n: int, l2: float, feature_bound: float, tol: float) -> float:
    """Δ₂ of the released θ for a training set of n records (see the module docstring)."""
    if n < 1 or not l2 > 0 or not feature_bound > 0 or tol < 0:
        raise ValueError("need n >= 1, l2 > 0, feature_bound > 0 and tol >= 0")
    lipschitz = math.sqrt(2.0) * math.sqrt(feature_bound**2 + 1.0)
    return 2.0 * lipschitz / (n * l2) + 2.0 * tol / l2


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
    return solve(X, Y, l2, intercept=True, tol=tol, max_iter=max_iter)
