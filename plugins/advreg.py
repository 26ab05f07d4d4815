"""Adversarial regularisation (Nasr, Shokri & Houmansadr, CCS 2018): train the classifier against the best
membership attack on it, a min-max game.

Per step, as the paper's Algorithm 1: ``attack_steps`` steps of the inference model h(f(x), y) (an MLP on the
classifier's softmax output and the one-hot label) maximising its gain, log h on a batch of members plus
log(1 − h) on an equal-sized batch of the reference set; then one step of the classifier on the members' batch
minimising cross-entropy + λ·log h(f(x), y), so that members look like non-members to h. The classifier trains on
every member; the reference set (the paper's D', non-members from the same distribution) is the population data
the challenger gives the defender (``FitTask.reference_X``), disjoint from the members and the challenge. Draws
from each model's own seed; claims no privacy guarantee.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field, PositiveInt

from arena import RECIPE_FIELDS, Defense, Fit, FitTask, PluginParams, hookimpl
from arena_plugins.defense_kit import StackedMLP, indexed, masked_mean, model_seeds, refuse_newton, retired, rows


class AdvRegParams(PluginParams):
    lam: float = Field(default=1.0, ge=0.0, le=1e4, allow_inf_nan=False,
                       description="λ: weight of the attack's gain in the classifier's loss")
    attack_steps: PositiveInt = Field(default=1, le=100, description="steps of the attack model per classifier step")
    hidden: PositiveInt = Field(default=64, le=4096, description="width of the attack model's hidden layers")
    attack_lr: float = Field(default=1e-3, gt=0.0, le=10.0, allow_inf_nan=False,
                             description="Adam learning rate of the attack model")
    _retired = retired("adv-reg", "reference")


def attack_features(probs: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The inference model's input: the classifier's output and the one-hot label, side by side [K, B, 2C]."""
    return torch.cat([probs, F.one_hot(y, probs.shape[-1]).to(probs.dtype)], dim=-1)


class AdversarialRegularisation(Defense):
    """Min-max training against an adaptive membership classifier (Nasr et al. 2018)."""

    name = "adv-reg"
    version = "2"
    Params = AdvRegParams
    params: AdvRegParams
    honours = RECIPE_FIELDS - {"solver"}
    needs_reference = True

    def fit(self, task: FitTask) -> Fit:
        refuse_newton(self.name, task)
        p, C = self.params, task.arch.n_classes
        Xr, yr = task.reference(self.name)
        sub = indexed(task)
        gens = [np.random.default_rng(s) for s in model_seeds(task, "adv-reg-reference")]
        widths = [2 * C, p.hidden, max(1, p.hidden // 2)]
        attack = StackedMLP(model_seeds(task, "adv-reg-attack"), widths, task.X.dtype, task.device)
        attack_opt = torch.optim.Adam(attack.parameters(), lr=p.attack_lr)
        ensemble = task.ensemble()
        opt = task.optimizer(ensemble)
        R = Xr.shape[1]
        for X, pos, valid in sub.minibatches():
            y = task.y.gather(1, pos)
            for _ in range(p.attack_steps):
                ref = torch.from_numpy(np.stack([g.integers(0, R, pos.shape[1]) for g in gens])).to(task.device)
                with torch.no_grad():
                    members = attack_features(ensemble(X).softmax(-1), y)
                    others = attack_features(ensemble(rows(Xr, ref)).softmax(-1), yr.gather(1, ref))
                # the attack's gain log h(members) + log(1 − h(reference)), maximised: its negative minimised
                loss = masked_mean(F.softplus(-attack(members)), valid) + F.softplus(attack(others)).mean(dim=1)
                attack_opt.zero_grad(set_to_none=True)
                loss.sum().backward()
                attack_opt.step()
            out = ensemble(X)
            ce = F.cross_entropy(out.transpose(1, 2), y, reduction="none")
            gain = F.logsigmoid(attack(attack_features(out.softmax(-1), y)))  # log h on members
            opt.zero_grad(set_to_none=True)
            (masked_mean(ce, valid) + p.lam * masked_mean(gain, valid)).sum().backward()
            opt.step()
        return task.finish(ensemble, opt)


@hookimpl
def register_defenses(register) -> None:  # noqa: ANN001
    register(AdversarialRegularisation)
