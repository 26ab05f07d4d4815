"""Built-in defenses: non-private training and DP-SGD (Abadi et al. 2016) calibrated by a real accountant."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat

from arena.defense import Claim, Defense, Fit, FitTask
from arena.engine.accounting import accountant_label, calibrate_noise
from arena.engine.newton import fit_logreg
from arena.engine.trainer import DPNoise, steps_and_rate, train
from arena.hookspecs import hookimpl


class NonPrivate(Defense):
    """Ordinary training; logistic regression goes to its exact optimum (Newton) unless the track asks otherwise."""

    name = "nonprivate"

    def fit(self, task: FitTask) -> Fit:
        newton = task.solver == "newton" or (task.solver == "auto" and task.arch.kind == "logreg")
        if newton:
            if task.arch.kind != "logreg":
                raise ValueError("solver 'newton' applies to logistic regression only")
            params = fit_logreg(task.X.double(), task.y, task.arch.n_classes, task.arch.l2)
        else:
            params = train(task.arch, task.X, task.y, task.recipe, task.init_seeds, task.train_seeds)
        return Fit(params, None)


class DPSGDParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    epsilons: list[PositiveFloat] = Field(min_length=1, description="one configuration per target ε")
    delta: float = Field(gt=0.0, lt=1.0)
    clip: PositiveFloat = 1.0
    accountant: Literal["rdp", "pld"] = "rdp"


class DPSGD(Defense):
    """DP-SGD with Poisson sampling at q = B/N, clipping to C, noise σC on the clipped sum; σ from the accountant."""

    name = "dpsgd"
    Params = DPSGDParams
    params: DPSGDParams

    @classmethod
    def expand(cls, params: DPSGDParams) -> list[BaseModel]:
        return [params.model_copy(update={"epsilons": [eps]}) for eps in params.epsilons]

    def target_epsilon(self) -> float:
        return self.params.epsilons[0]

    def target_delta(self) -> float:
        return self.params.delta

    def validate_for(self, n_train: int) -> list[tuple[str, str]]:
        if self.params.delta >= 1.0 / n_train:
            return [("delta", f"must be below 1/N = {1.0 / n_train:.3g} for a training set of {n_train} records")]
        return []

    def fit(self, task: FitTask) -> Fit:
        if task.solver == "newton":
            raise ValueError("dpsgd trains by noisy gradient steps; solver 'newton' does not apply")
        steps, q = steps_and_rate(task.n, task.recipe)
        sigma, achieved = calibrate_noise(self.target_epsilon(), q, steps, self.params.delta, self.params.accountant)
        noise = DPNoise(clip=self.params.clip, noise_multiplier=sigma)
        params = train(task.arch, task.X, task.y, task.recipe, task.init_seeds, task.train_seeds, dp=noise)
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
        return Fit(params, claim)


@hookimpl
def register_defenses(register) -> None:  # noqa: ANN001
    register(NonPrivate)
    register(DPSGD)
