"""Built-in reconstruction attacks (Balle, Cherubin & Hayes 2022): the GLM closed form and the reconstructor network."""

from __future__ import annotations

import math

import torch
from pydantic import Field, PositiveFloat, PositiveInt

from arena import (
    Attack,
    Layers,
    Models,
    PluginParams,
    ReconstructionGuess,
    ReconstructionView,
    Track,
    clip_rows,
    derive_seed,
    hookimpl,
    logreg_gradient,
)


def glm_closed_form(
    params: Layers,
    fixed_X: torch.Tensor,
    fixed_y: torch.Tensor,
    l2: float,
    *,
    intercept_penalised: bool = False,
    feature_norm: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Records [K, d] and labels [K] of the one unknown training point of each of K logistic regressions.

    Model k = [W_k, b_k] minimises (1/n) Σ CE + (l2/2)||W||² over D⁻ ∪ {z_k}, n = |D⁻| + 1 (the objective of
    ``arena.fit_logreg``), or with ``intercept_penalised`` (l2/2)||[W; b]||² (output perturbation's objective,
    ``arena.fit_penalised``). At the optimum the gradient vanishes, so z's terms equal
    minus D⁻'s:
    intercept: r = softmax(W x + b) - onehot(y) = -Σ_{D⁻} r_i  [- n l2 b when the intercept is penalised];
    weights:   x rᵀ = -Σ_{D⁻} x_i r_iᵀ - n l2 W.
    Hence x = (x rᵀ)[:, c] / r[c] for the class c with the largest |r[c]|, and y is the one class whose r < 0.
    With ``feature_norm`` R the procedure trained on every x scaled to norm <= R: D⁻ is clipped the same way
    before its terms are summed, and the record recovered is the clipped target (equal to the target when it lies
    inside the ball, its projection onto the sphere of radius R otherwise). All K models at once, in float64.
    """
    W, b = (p.to(torch.float64) for p in params)
    K, d, _ = W.shape
    m = len(fixed_y)
    n = m + 1
    X = fixed_X.to(torch.float64)
    if feature_norm is not None:
        X = clip_rows(X, feature_norm)
    # (1/m) Σ_{D⁻}, no penalty
    mean_W, mean_b = logreg_gradient(X.expand(K, -1, -1), fixed_y.expand(K, -1), [W, b], 0.0)
    residual = -m * mean_b - (n * l2 * b if intercept_penalised else 0.0)
    outer = -(m * mean_W + n * l2 * W)
    c = residual.abs().argmax(dim=-1)
    column = outer.gather(2, c.view(K, 1, 1).expand(K, d, 1)).squeeze(-1)
    records = column / residual.gather(1, c.view(K, 1))
    return records, residual.argmin(dim=-1)


def training_objective(procedure, n_features: int) -> tuple[bool, float | None]:  # noqa: ANN001
    """(intercept penalised?, feature-norm bound R or None) of the objective ``procedure``'s defense optimises.

    Read from the training procedure the informed adversary knows: output perturbation (Chaudhuri et al.) fits
    mean CE + (λ/2)||[W; b]||² on features clipped to norm R (default √d); every other defense is taken to fit the
    track's objective, mean CE + (λ/2)||W||² with a free intercept, on the raw features.
    """
    defense = procedure.defense
    if defense.name == "output-perturbation":
        bound = getattr(defense.params, "feature_norm", None)
        return True, float(bound) if bound is not None else math.sqrt(n_features)
    return False, None


def candidate_residuals(
    params: Layers,
    fixed_X: torch.Tensor,
    fixed_y: torch.Tensor,
    candidates_X: torch.Tensor,
    candidates_y: torch.Tensor,
    l2: float,
    *,
    intercept_penalised: bool = False,
    feature_norm: float | None = None,
) -> torch.Tensor:
    """[K, N]: n·||∇F(θ_k)|| with F the objective on D⁻ ∪ {candidate j}: how far model k is from being that fit's
    optimum.

    Zero for the candidate model k was trained with when it sits at its exact optimum. With G_k = Σ_{D⁻} ∇ℓ_i +
    n λ θ_k (the known part) and x̃_j r_jᵀ candidate j's term, ||G + x̃ rᵀ||² = ||G||² + 2 x̃ᵀ G r + ||x̃||² ||r||²,
    so no [K, N, d, C] tensor is formed.
    """
    W, b = (p.to(torch.float64) for p in params)
    K, d, C = W.shape
    m = len(fixed_y)
    n = m + 1
    X, Xc = fixed_X.to(torch.float64), candidates_X.to(torch.float64)
    if feature_norm is not None:
        X, Xc = clip_rows(X, feature_norm), clip_rows(Xc, feature_norm)
    mean_W, mean_b = logreg_gradient(X.expand(K, -1, -1), fixed_y.expand(K, -1), [W, b], 0.0)
    G = torch.cat([m * mean_W + n * l2 * W, (m * mean_b + (n * l2 * b if intercept_penalised else 0.0))[:, None]], 1)
    Xt = torch.cat([Xc, torch.ones_like(Xc[:, :1])], 1)  # [N, d+1]
    logits = torch.einsum("jd,kdc->kjc", Xt, torch.cat([W, b[:, None]], 1))
    r = torch.softmax(logits, -1) - torch.nn.functional.one_hot(candidates_y, C).to(torch.float64)  # [K, N, C]
    cross = torch.einsum("jd,kdc,kjc->kj", Xt, G, r)
    sq = (G**2).sum((1, 2))[:, None] + 2 * cross + (Xt**2).sum(1)[None] * (r**2).sum(-1)
    return sq.clamp(min=0.0).sqrt()


class GLMReconstruction(Attack):
    """Exact reconstruction against logistic regression trained to its optimum, from D⁻ and the parameters alone.

    It solves the optimality conditions of the objective the defense actually optimised (``training_objective``):
    against output perturbation that is the penalised intercept and clipped features, so on the noise-free optimum
    it recovers the clipped target exactly. Under a discrete prior it answers with the candidate whose
    optimality-condition residual (``candidate_residuals``) is smallest.
    """

    name = "glm-reconstruction"
    game = "reconstruction"
    threat_model = frozenset({"parameters", "fixed-set", "training", "prior"})

    def skip_reason(self, track: Track) -> str | None:
        if track.model.name != "logreg":
            return (
                "glm-reconstruction solves the optimality conditions of logistic regression; "
                f"this track's model is {track.model.name!r}"
            )
        return None

    def run(self, view: ReconstructionView) -> ReconstructionGuess:
        penalised, bound = training_objective(view.train, view.n_features)
        layers = view.parameters.layers()
        if view.candidates_X is not None:
            assert view.candidates_y is not None  # granted together with candidates_X
            scores = candidate_residuals(layers, view.fixed_X, view.fixed_y, view.candidates_X, view.candidates_y,
                                         view.l2, intercept_penalised=penalised, feature_norm=bound)
            pick = scores.argmin(dim=1)
            return ReconstructionGuess(records=view.candidates_X[pick].numpy(), labels=view.candidates_y[pick].numpy())
        records, labels = glm_closed_form(layers, view.fixed_X, view.fixed_y, view.l2,
                                          intercept_penalised=penalised, feature_norm=bound)
        return ReconstructionGuess(records=records.numpy(), labels=labels.numpy())


class ReconNNParams(PluginParams):
    shadows: PositiveInt | None = Field(default=None, strict=True, le=1_000_000,
                                        description="shadow models; default: one per shadow target")
    hidden: list[PositiveInt] = Field(default=[256, 256], min_length=1, description="reconstructor hidden widths")
    epochs: PositiveInt = Field(default=100, strict=True, le=1_000_000)
    lr: PositiveFloat = Field(default=1e-3, strict=True, allow_inf_nan=False)
    batch_size: PositiveInt | None = Field(default=64, strict=True,
                                           description="Adam minibatch; null for full batch")


def shadow_models(view, X: torch.Tensor, y: torch.Tensor) -> Models:  # noqa: ANN001
    """One model per shadow target (X [N, d], y [N]), each trained on D⁻ ∪ {target} by the target's own procedure.

    One batched call; the released models' initialisation seed when the game discloses it, else fresh ones.
    """
    N = len(y)
    Xs = torch.cat([view.fixed_X.expand(N, -1, -1), X[:, None]], dim=1)
    ys = torch.cat([view.fixed_y.expand(N, -1), y[:, None]], dim=1)
    if view.init_seed is None:
        init = [derive_seed(view.seed, "shadow-init", i) for i in range(N)]
    else:
        init = [view.init_seed] * N
    models, _ = view.train(Xs, ys, init, [derive_seed(view.seed, "shadow-train", i) for i in range(N)])
    return models


def fit_reconstructor(
    inputs: torch.Tensor, records: torch.Tensor, params: ReconNNParams, seed: int
) -> torch.nn.Sequential:
    """An MLP from standardised parameters to records in [0, 1] (sigmoid output), trained with Adam on MSE + MAE."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        layers: list[torch.nn.Module] = []
        width = inputs.shape[1]
        for h in params.hidden:
            layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
            width = h
        net = torch.nn.Sequential(*layers, torch.nn.Linear(width, records.shape[1]), torch.nn.Sigmoid())
    optimiser = torch.optim.Adam(net.parameters(), lr=params.lr)
    order = torch.Generator().manual_seed(seed)
    n = len(records)
    batch = params.batch_size or n
    for _ in range(params.epochs):
        perm = torch.randperm(n, generator=order)
        for start in range(0, n, batch):
            idx = perm[start : start + batch]
            error = net(inputs[idx]) - records[idx]
            loss = error.square().mean() + error.abs().mean()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    return net


class ReconNN(Attack):
    """Reconstructor network: learns the map from a model's parameters back to the unknown training point.

    Trains N shadow models on D⁻ ∪ {shadow target} with the released models' own training procedure (DP noise
    and the known initialisation included), standardises their flattened parameters, fits an MLP from parameters
    to shadow targets and applies it to the released models. Under a discrete prior the shadow targets are the
    candidates in turn (N / n shadow models each) and the answer is the candidate nearest the reconstruction.
    """

    name = "reconn"
    game = "reconstruction"
    threat_model = frozenset({"parameters", "fixed-set", "training", "prior"})
    Params = ReconNNParams
    params: ReconNNParams

    def run(self, view: ReconstructionView) -> ReconstructionGuess:
        n = self.params.shadows or len(view.shadow_y)
        candidates = view.candidates_X
        if candidates is not None:  # discrete prior: the shadow targets are the candidates, in turn
            assert view.candidates_y is not None  # granted together with candidates_X
            turn = torch.arange(n) % len(view.candidates_y)
            X, y = candidates[turn], view.candidates_y[turn]
        elif n > len(view.shadow_y):
            raise ValueError(f"shadows={n}, but the game grants {len(view.shadow_y)} shadow targets")
        else:
            X, y = view.shadow_X[:n], view.shadow_y[:n]
        shadow = shadow_models(view, X, y).flat().to(torch.float32)
        released = view.parameters.flat().to(torch.float32)
        mean, std = shadow.mean(0), shadow.std(0)
        std = torch.where(std > 0, std, torch.ones_like(std))  # a coordinate no target moves carries nothing
        net = fit_reconstructor((shadow - mean) / std, X.to(torch.float32), self.params, view.seed)
        with torch.no_grad():
            records = net((released - mean) / std)
        if candidates is not None:  # answer with the candidate closest to the reconstruction
            assert view.candidates_y is not None
            pick = torch.cdist(records.to(torch.float64), candidates.to(torch.float64)).argmin(dim=1)
            return ReconstructionGuess(records=candidates[pick].numpy(), labels=view.candidates_y[pick].numpy())
        return ReconstructionGuess(records=records.numpy())


@hookimpl
def register_attacks(register) -> None:  # noqa: ANN001
    register(GLMReconstruction)
    register(ReconNN)
