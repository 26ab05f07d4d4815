"""Built-in defenses: non-private training, DP-SGD (Abadi et al. 2016) calibrated by a real accountant, and output
perturbation for L2-regularised logistic regression (Chaudhuri et al. 2011)."""

from __future__ import annotations

import math
from typing import Annotated, Literal

import torch
from pydantic import BaseModel, Field, PositiveFloat

from arena import (
    Claim,
    Defense,
    DPNoise,
    Fit,
    FitTask,
    PluginParams,
    RandomPurpose,
    accountant_label,
    calibrate_noise,
    clip_rows,
    design,
    fit_logreg,
    fit_penalised,
    hookimpl,
    l1_from_l2,
    l2_sensitivity,
    laplace,
    laplace_scale,
    random_stream,
    steps_and_rate,
    to_state,
)


class NonPrivate(Defense):
    """Ordinary training; penalised logistic regression (l2 > 0) goes to its exact optimum (Newton) unless the track
    asks otherwise. Without a penalty the optimum may not exist (separable data) and the Newton system may be
    singular (constant features), so ``auto`` then trains by gradient steps."""

    name = "nonprivate"

    def fit(self, task: FitTask) -> Fit:
        dense = task.arch.dense
        is_logreg = dense is not None and dense.kind == "logreg"
        if task.solver == "newton" or (task.solver == "auto" and is_logreg and task.arch.l2 > 0):
            if not is_logreg:
                raise ValueError("solver 'newton' applies to logistic regression only")
            if not task.arch.l2 > 0:
                raise ValueError("solver 'newton' needs model.l2 > 0: without a penalty the optimum may not exist")
            layers = fit_logreg(task.X.double(), task.y, task.arch.n_classes, task.arch.l2)
            return Fit(to_state(list(task.arch.template().trainable), layers), None)
        return Fit(task.train(), None)


class EpsilonSweep(Defense):
    """A DP defense whose scenario entry lists target budgets (``epsilons``): one configuration per ε."""

    # (every sweep's Params declares ``epsilons``; the base class types them as a plain BaseModel)
    @classmethod
    def expand(cls, params: BaseModel) -> list[BaseModel]:
        return [params.model_copy(update={"epsilons": [eps]}) for eps in params.epsilons]  # type: ignore[attr-defined]

    def target_epsilon(self) -> float:
        return self.params.epsilons[0]  # type: ignore[attr-defined]


Epsilon = Annotated[float, Field(strict=True, ge=1e-3, le=1e3, allow_inf_nan=False)]
"""A target ε: finite, in [0.001, 1000] (outside it no accountant or noise scale is meaningful)."""


def delta_problems(delta: float, n_train: int) -> list[tuple[str, str]]:
    """A DP claim's δ must be below 1/N: at 1/N a mechanism may publish one record outright and still claim it."""
    if delta >= 1.0 / n_train:
        return [("delta", f"must be below 1/N = {1.0 / n_train:.3g} for a training set of {n_train} records")]
    return []


class DPSGDParams(PluginParams):
    epsilons: list[Epsilon] = Field(min_length=1, description="one configuration per target ε, each in [1e-3, 1e3]")
    delta: float = Field(strict=True, ge=1e-12, lt=1.0, allow_inf_nan=False, description="in [1e-12, 1/N)")
    clip: PositiveFloat = Field(default=1.0, strict=True, le=1e6, allow_inf_nan=False)
    accountant: Literal["rdp", "pld"] = "rdp"


class DPSGD(EpsilonSweep):
    """DP-SGD with Poisson sampling at q = B/N, clipping to C, noise σC on the clipped sum; σ from the accountant."""

    name = "dpsgd"
    Params = DPSGDParams
    per_example_gradients = True
    params: DPSGDParams

    def target_delta(self) -> float:
        return self.params.delta

    def validate_for(self, n_train: int) -> list[tuple[str, str]]:
        return delta_problems(self.params.delta, n_train)

    def fit(self, task: FitTask) -> Fit:
        if task.solver == "newton":
            raise ValueError("dpsgd trains by noisy gradient steps; solver 'newton' does not apply")
        steps, q = steps_and_rate(task.n, task.recipe)
        sigma, achieved = calibrate_noise(self.target_epsilon(), q, steps, self.params.delta, self.params.accountant)
        state = self.train_private(task, DPNoise(clip=self.params.clip, noise_multiplier=sigma))
        claim = Claim(
            epsilon=achieved,
            delta=self.params.delta,
            accountant=accountant_label(self.params.accountant),
            target_epsilon=self.target_epsilon(),
            noise_multiplier=sigma,
            sample_rate=q,
            steps=steps,
            mechanism="DP-SGD, Poisson-subsampled Gaussian, add/remove",
        )
        return Fit(state, claim)

    def train_private(self, task: FitTask, noise: DPNoise) -> dict[str, torch.Tensor]:
        """The K models trained by the engine's DP-SGD at ``noise`` (a variant changes how, not the mechanism)."""
        return task.train(noise)


class OutputPerturbationParams(PluginParams):
    epsilons: list[Epsilon] = Field(min_length=1, description="one configuration per target ε, each in [1e-3, 1e3]")
    feature_norm: PositiveFloat | None = Field(
        default=None, strict=True, le=1e6, allow_inf_nan=False,
        description="R: each x is clipped to norm <= R; default sqrt(d), the longest x in [0, 1]^d",
    )


class OutputPerturbation(EpsilonSweep):
    """Pure ε-DP logistic regression: exact L2-regularised optimum plus Laplace noise (Chaudhuri et al. 2011).

    Features are clipped to norm R, the intercept is penalised like the weights (an unpenalised coordinate has
    no sensitivity bound), and the noise per coordinate is Lap(Δ₁/ε) with the L1 sensitivity bounded from the
    L2 one as Δ₁ = sqrt(P) Δ₂ over all P = (d+1)·C parameters; see ``arena.l2_sensitivity`` and ``arena.l1_from_l2``.
    Only logistic regression with model.l2 > 0 qualifies (the sensitivity is 2L/(Nλ)).
    """

    name = "output-perturbation"
    Params = OutputPerturbationParams
    params: OutputPerturbationParams
    tol = 1e-10

    def target_delta(self) -> float:
        return 0.0

    def fit(self, task: FitTask) -> Fit:
        arch = task.arch
        if arch.dense is None or arch.dense.kind != "logreg":
            raise ValueError(f"output-perturbation applies to model 'logreg' only, not {arch.model.name!r}")
        if not arch.l2 > 0:
            raise ValueError("output-perturbation needs model.l2 > 0: its sensitivity 2L/(Nλ) is unbounded at λ = 0")
        if task.solver == "gradient":
            raise ValueError("output-perturbation needs the exact optimum; solver 'gradient' does not apply")
        bound = self.params.feature_norm or math.sqrt(arch.n_features)
        X = design(clip_rows(task.X.to(torch.float64), bound))
        theta = fit_penalised(X, task.y, arch.n_classes, arch.l2, tol=self.tol)
        l2_sens = l2_sensitivity(task.n, arch.l2, bound, self.tol)
        l1_sens = l1_from_l2(l2_sens, theta[0].numel())
        scale = laplace_scale(l1_sens, self.target_epsilon())
        noisy = theta + laplace(task.train_seeds, random_stream(RandomPurpose.NOISE), tuple(theta.shape[1:]), scale,
                                l1_sensitivity=l1_sens)
        claim = Claim(
            epsilon=self.target_epsilon(),
            delta=0.0,
            accountant="Laplace mechanism (pure ε-DP, exact)",
            target_epsilon=self.target_epsilon(),
            mechanism=(
                f"output perturbation (Chaudhuri et al. 2011), add/remove: Lap({scale:.4g}) on each of "
                f"{theta[0].numel()} parameters, L1 sensitivity {l1_sens:.4g} = sqrt(P) x L2 sensitivity {l2_sens:.4g}"
            ),
        )
        layers = [noisy[:, :-1], noisy[:, -1]]
        return Fit(to_state(list(arch.template().trainable), layers), claim)


@hookimpl
def register_defenses(register) -> None:  # noqa: ANN001
    register(NonPrivate)
    register(DPSGD)
    register(OutputPerturbation)
