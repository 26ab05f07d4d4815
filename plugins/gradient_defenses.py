"""Built-in defenses of a federated client's update (the ``gradients`` game): DP-SGD at the client (per-example
clipping, Abadi et al. 2016), DP-FedAvg (per-client clipping, McMahan et al. 2018), top-k gradient pruning (Zhu et
al. 2019's defense), uniform quantisation, and secure aggregation (Bonawitz et al. 2017) modelled as the server
seeing only the sum of several clients' updates.

The global model before the attacked round is trained without protection by each (``UpdateDefense.fit``); each
acts on the round's update. Noise comes from the game's generator for the trial, so every attack sees the same
noisy update.
"""

from __future__ import annotations

import math
from typing import Annotated, ClassVar, Literal

import torch
from pydantic import BaseModel, Field, PositiveFloat

from arena import Claim, Fit, FitTask, PluginParams, UpdateDefense, accountant_label, calibrate_noise, hookimpl, train

Epsilon = Annotated[float, Field(strict=True, ge=1e-3, le=1e3, allow_inf_nan=False)]
Update = dict[str, torch.Tensor]


class _Update(UpdateDefense):
    """The global model before the attacked round: trained by the engine on its records, unprotected."""

    def fit(self, task: FitTask) -> Fit:
        return Fit(train(task.arch, task.X, task.y, task.recipe, task.init_seeds, task.train_seeds), None)


class ClientDPParams(PluginParams):
    epsilons: list[Epsilon] = Field(min_length=1, description="one configuration per target ε, each in [1e-3, 1e3]")
    delta: float = Field(strict=True, ge=1e-12, lt=1.0, allow_inf_nan=False, description="in [1e-12, 1/B)")
    clip: PositiveFloat = Field(default=1.0, strict=True, le=1e6, allow_inf_nan=False)
    accountant: Literal["rdp", "pld"] = "rdp"


class _Calibrated(_Update):
    """An ε sweep whose noise multiplier is calibrated when the game asks for the claim (``update_claim``, before
    any update is computed), for the full-batch Gaussian mechanism composed over the steps it protects."""

    Params = ClientDPParams
    params: ClientDPParams
    mechanism: ClassVar[str]
    _sigma: float | None = None

    @classmethod
    def expand(cls, params: BaseModel) -> list[BaseModel]:
        return [params.model_copy(update={"epsilons": [eps]}) for eps in params.epsilons]  # type: ignore[attr-defined]

    def target_epsilon(self) -> float:
        return self.params.epsilons[0]

    def target_delta(self) -> float:
        return self.params.delta

    def validate_for(self, n_train: int) -> list[tuple[str, str]]:
        if self.params.delta >= 1.0 / n_train:
            return [("delta", f"must be below 1/B = {1.0 / n_train:.3g} for a client batch of {n_train} records")]
        return []

    def protected_steps(self, steps: int) -> int:
        return steps

    def update_claim(self, batch_size: int, steps: int) -> Claim:
        """σ for ε at q = 1 over the protected steps (dp_accounting), and the claim with σ, q and T for the
        reconstruction bounds."""
        T = self.protected_steps(steps)
        sigma, achieved = calibrate_noise(self.target_epsilon(), 1.0, T, self.params.delta, self.params.accountant)
        self._sigma = sigma
        return Claim(epsilon=achieved, delta=self.params.delta, accountant=accountant_label(self.params.accountant),
                     target_epsilon=self.target_epsilon(), noise_multiplier=sigma, sample_rate=1.0, steps=T,
                     mechanism=self.mechanism)

    def sigma(self) -> float:
        if self._sigma is None:
            raise RuntimeError(f"defense {self.name!r}: the game computes an update before asking for the claim")
        return self._sigma

    def noise(self, like: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """N(0, (σC)²) per coordinate."""
        z = torch.randn(like.shape, generator=generator, dtype=torch.float64)
        return (z * self.sigma() * self.params.clip).to(like.dtype)


def norms(per_example: Update) -> torch.Tensor:
    """The L2 norm of each record's gradient over every tensor, [B]."""
    return torch.sqrt(sum(g.reshape(len(g), -1).pow(2).sum(1) for g in per_example.values()))  # type: ignore[arg-type]


class ClientDPSGD(_Calibrated):
    """DP-SGD at the client: each local step clips every record's gradient to norm C, sums, adds N(0, (σC)²) and
    divides by B. Per record of the batch (add/remove), S local steps compose S Gaussian mechanisms (q = 1)."""

    name = "client-dpsgd"
    per_example: ClassVar[bool] = True
    per_example_gradients = True
    mechanism = "client DP-SGD: per-example clipping, Gaussian noise, q = 1, add/remove"

    def local_gradient(self, per_example: Update, generator: torch.Generator) -> Update:
        B = len(next(iter(per_example.values())))
        scale = torch.clamp(self.params.clip / (norms(per_example) + 1e-12), max=1.0)
        out = {}
        for k, g in per_example.items():
            summed = (g * scale.view(-1, *([1] * (g.ndim - 1)))).sum(0)
            out[k] = (summed + self.noise(summed, generator)) / B
        return out


class DPFedAvg(_Calibrated):
    """DP-FedAvg (McMahan et al. 2018): the client's whole update is clipped to norm C and N(0, (σC)²) added once;
    one Gaussian mechanism per round for the client (user level), hence for each of its records."""

    name = "dp-fedavg"
    mechanism = "DP-FedAvg: per-client clipping, Gaussian noise, one round, add/remove of the client"

    def protected_steps(self, steps: int) -> int:
        return 1

    def shared(self, update: Update, generator: torch.Generator) -> Update:
        norm = torch.sqrt(sum(t.pow(2).sum() for t in update.values()))  # type: ignore[arg-type]
        scale = min(1.0, self.params.clip / (float(norm) + 1e-12))
        return {k: t * scale + self.noise(t, generator) for k, t in update.items()}


Rate = Annotated[float, Field(strict=True, ge=0.0, lt=1.0, allow_inf_nan=False)]


class PruningParams(PluginParams):
    rates: list[Rate] = Field(min_length=1, description="share of the update's entries set to zero, each in [0, 1)")


class GradientPruning(_Update):
    """Top-k sparsification: the ``rate`` share of the update's entries smallest in magnitude (over every tensor
    together) are set to zero before sending (Zhu et al. 2019 tried it against DLG)."""

    name = "gradient-pruning"
    Params = PruningParams
    params: PruningParams

    @classmethod
    def expand(cls, params: BaseModel) -> list[BaseModel]:
        return [params.model_copy(update={"rates": [r]}) for r in params.rates]  # type: ignore[attr-defined]

    def shared(self, update: Update, generator: torch.Generator) -> Update:
        flat = torch.cat([t.reshape(-1) for t in update.values()])
        keep = max(1, math.ceil((1.0 - self.params.rates[0]) * flat.numel()))
        kept, order, start = torch.zeros_like(flat), flat.abs().topk(keep).indices, 0
        kept[order] = flat[order]
        out = {}
        for k, t in update.items():
            out[k] = kept[start : start + t.numel()].reshape(t.shape)
            start += t.numel()
        return out


class QuantisationParams(PluginParams):
    bits: int = Field(default=4, strict=True, ge=1, le=16, description="bits per entry (sign and magnitude)")


class GradientQuantisation(_Update):
    """Uniform symmetric quantisation per tensor: 2^(bits−1) − 1 levels each side of zero up to the tensor's
    largest magnitude (bits = 1: the sign times the mean magnitude, as signSGD with a scale)."""

    name = "gradient-quantisation"
    Params = QuantisationParams
    params: QuantisationParams

    def shared(self, update: Update, generator: torch.Generator) -> Update:
        out = {}
        for k, t in update.items():
            if self.params.bits == 1:
                out[k] = torch.sign(t) * t.abs().mean()
                continue
            levels = 2 ** (self.params.bits - 1) - 1
            scale = t.abs().max() / levels
            out[k] = torch.round(t / scale) * scale if scale > 0 else t.clone()
        return out


class SecureAggregationParams(PluginParams):
    clients: int = Field(default=4, strict=True, ge=2, le=1000, description="clients whose updates are summed")


class SecureAggregation(_Update):
    """Secure aggregation modelled by its effect: the server sees only the sum of ``clients`` clients' updates,
    each on a batch of its own; the updates themselves are unprotected."""

    name = "secure-aggregation"
    Params = SecureAggregationParams
    params: SecureAggregationParams

    def clients(self) -> int:
        return self.params.clients


@hookimpl
def register_defenses(register) -> None:  # noqa: ANN001 - the registry's callback
    for cls in (ClientDPSGD, DPFedAvg, GradientPruning, GradientQuantisation, SecureAggregation):
        register(cls)
