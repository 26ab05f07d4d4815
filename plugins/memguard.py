"""MemGuard (Jia et al., CCS 2019): an inference-time defense that turns each answered confidence vector into an
adversarial example for a membership classifier, without changing the predicted label.

Training: the released model trains as ``nonprivate`` does (the engine's training, every member). The defender's
own membership classifier g (logistic regression on the sorted confidence vector) learns, as in the paper, from
the released model's outputs on its training set (members) against those on the reference set (non-members:
population records the challenger gives the defender, ``FitTask.reference_X``, disjoint from the members and the
challenge), classes weighted equally. g's weights travel with the release.

Answering, per query with confidence vector s = softmax(z) and label l (the paper's Phase I): starting from z,
normalised gradient steps on |g's decision value| + c₂·max(0, max_{j≠l} z'_j − z'_l) + c₃·||softmax(z') − s||₂;
the noise e = softmax(z') − s is the first iterate at which g's decision changes side with the label kept (none
found: e = 0). Phase II: the answer is s + e with probability min(1, ε/||e||₁) (ε the expected L1 distortion
budget), else s; the coin is a hash of the query's output, so answers are deterministic. The label is never
changed, so label-only attacks see the model as it is. Claims no privacy guarantee.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field, PositiveInt

from arena import RECIPE_FIELDS, Defense, Fit, FitTask, Models, PluginParams, hookimpl, train
from arena_plugins.defense_kit import StackedMLP, model_seeds, retired, row_hash

_COIN = 1 << 20


class MemGuardParams(PluginParams):
    budget: float = Field(default=1.0, gt=0.0, le=2.0, allow_inf_nan=False,
                          description="ε: the expected L1 distortion of an answer, in (0, 2]")
    steps: PositiveInt = Field(default=100, le=10_000, description="gradient steps of Phase I per query")
    step_size: float = Field(default=0.1, gt=0.0, le=100.0, allow_inf_nan=False, description="β of Phase I")
    c2: float = Field(default=10.0, ge=0.0, le=1e6, allow_inf_nan=False, description="weight of the label term")
    c3: float = Field(default=0.1, ge=0.0, le=1e6, allow_inf_nan=False, description="weight of the distortion term")
    _retired = retired("memguard", "holdout")


def decision(probs: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """g's decision value [K, n] (log-odds of 'member') on confidence vectors probs [K, n, C]."""
    return torch.baddbmm(b.unsqueeze(1), probs.sort(dim=-1, descending=True).values, w).squeeze(-1)


def phase_one(z: torch.Tensor, w: torch.Tensor, b: torch.Tensor, p: MemGuardParams) -> torch.Tensor:
    """The noise e [K, n, C] on softmax(z) that moves g's decision across 0 with the label kept (0 where no
    iterate does)."""
    s = z.softmax(-1)
    label = z.argmax(-1, keepdim=True)
    side = decision(s, w, b) > 0
    is_label = F.one_hot(label.squeeze(-1), z.shape[-1]).bool()
    found = torch.zeros_like(side)
    noise = torch.zeros_like(s)
    zz = z.detach().clone()
    with torch.enable_grad():
        for _ in range(p.steps):
            zz.requires_grad_(True)
            q = zz.softmax(-1)
            margin = zz.masked_fill(is_label, float("-inf")).amax(-1) - zz.gather(-1, label).squeeze(-1)
            loss = (decision(q, w, b).abs() + p.c2 * F.relu(margin)
                    + p.c3 * (q - s).norm(dim=-1))
            (grad,) = torch.autograd.grad(loss.sum(), zz)
            with torch.no_grad():
                zz = zz - p.step_size * grad / grad.norm(dim=-1, keepdim=True).clamp_min(1e-12)
                q = zz.softmax(-1)
                hit = ~found & ((decision(q, w, b) > 0) != side) & (zz.argmax(-1, keepdim=True) == label).squeeze(-1)
                noise = torch.where(hit.unsqueeze(-1), q - s, noise)
                found = found | hit
            if bool(found.all()):
                break
    return noise


class MemGuard(Defense):
    """Confidence masking at answering time against the defender's own membership classifier (Jia et al. 2019)."""

    name = "memguard"
    version = "2"
    Params = MemGuardParams
    params: MemGuardParams
    honours = RECIPE_FIELDS - {"solver"}
    answers_queries = True
    needs_reference = True

    def fit(self, task: FitTask) -> Fit:
        if task.solver == "newton":
            raise ValueError("memguard trains by gradient steps; solver 'newton' does not apply")
        Xr, _ = task.reference(self.name)
        state = train(task.arch, task.X, task.y, task.recipe, task.init_seeds, task.train_seeds)
        released = Models(task.arch, state)
        members = released.predict_proba(task.X)
        others = released.predict_proba(Xr)
        g = StackedMLP(model_seeds(task, "memguard-classifier"), [task.arch.n_classes], task.X.dtype, task.device)
        opt = torch.optim.Adam(g.parameters(), lr=0.05)
        for _ in range(300):
            m_logit = decision(members, g.weights[0], g.biases[0])
            o_logit = decision(others, g.weights[0], g.biases[0])
            loss = F.softplus(-m_logit).mean(dim=1) + F.softplus(o_logit).mean(dim=1)
            opt.zero_grad(set_to_none=True)
            loss.sum().backward()
            opt.step()
        return Fit(state, None, {"w": g.weights[0].detach(), "b": g.biases[0].detach()})

    def answer(self, logits: torch.Tensor, answering: dict[str, torch.Tensor]) -> torch.Tensor:
        w, b = answering["w"].to(logits.dtype), answering["b"].to(logits.dtype)
        s = logits.softmax(-1)
        noise = phase_one(logits, w, b, self.params)
        distortion = noise.abs().sum(-1)
        coin = row_hash(logits, _COIN).to(logits.dtype) / _COIN
        use = coin < (self.params.budget / distortion.clamp_min(1e-12)).clamp(max=1.0)
        answered = torch.where(use.unsqueeze(-1), s + noise, s)
        # s + e is a probability vector (e is a difference of two); its log is the answer's logits
        return answered.clamp_min(torch.finfo(logits.dtype).tiny).log()


@hookimpl
def register_defenses(register) -> None:  # noqa: ANN001
    register(MemGuard)
