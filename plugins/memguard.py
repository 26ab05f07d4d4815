"""MemGuard (Jia et al., CCS 2019): an inference-time defense that turns each answered confidence vector into an
adversarial example for a membership classifier, without changing the predicted label.

Training: the released model trains as ``nonprivate`` does (the engine's training, every member). The defender's
own membership classifier g (Jia et al.'s defense classifier: a small fully connected network, hidden widths
``HIDDEN``, ReLU, on the sorted confidence vector) learns, as in the paper, from the released model's outputs on
its training set (members) against those on the reference set (non-members: population records the challenger
gives the defender, ``FitTask.reference_X``, disjoint from the members and the challenge), classes weighted
equally. g's weights travel with the release.

Answering, per query with confidence vector s = softmax(z) and label l (the paper's Phase I): starting from z,
normalised gradient steps on |g's decision value| + c₂·max(0, max_{j≠l} z'_j − z'_l) + c₃·||softmax(z') − s||₂; at
the first step that takes g's decision across its 0.5 output the step is bisected, and the noise e = softmax(z') −
s is taken at the boundary from the starting side (g's output 0.5 within the bisection's resolution, never past it
into the inverted region), with the label kept (none found: e = 0). Phase II: the answer is s + e with probability
min(1, ε/||e||₁) (ε the expected L1 distortion budget), else s; the coin is a hash of the query's output, so
answers are deterministic. The label is never changed, so label-only attacks see the model as it is. Claims no
privacy guarantee.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field, PositiveInt

from arena import RECIPE_FIELDS, Defense, Fit, FitTask, Models, PluginParams, hookimpl
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


Layers = list[tuple[torch.Tensor, torch.Tensor]]
"""The defense classifier g: per layer, stacked weights [K, d_in, d_out] and biases [K, d_out] (ReLU between)."""

HIDDEN = (64, 32)
"""Widths of g's hidden layers (Jia et al.'s defense classifier is a small fully connected network)."""

BISECTIONS = 40
"""Halvings of the last step when g's decision changes side: Phase I stops at g's 0.5 output, not past it."""


def decision(probs: torch.Tensor, layers: Layers) -> torch.Tensor:
    """g's decision value [K, n] (log-odds of 'member'; 0 is g's 0.5 output) on confidence vectors [K, n, C]."""
    h = probs.sort(dim=-1, descending=True).values
    for i, (w, b) in enumerate(layers):
        h = torch.baddbmm(b.unsqueeze(1), h, w)
        if i < len(layers) - 1:
            h = torch.relu(h)
    return h.squeeze(-1)


def phase_one(z: torch.Tensor, layers: Layers, p: MemGuardParams) -> torch.Tensor:
    """The noise e [K, n, C] on s = softmax(z) that brings g's decision to its boundary (0, g's 0.5 output) with
    the label kept: normalised gradient steps on z (the paper's loss), and, at the first step that crosses the
    boundary, a bisection of that step; e is softmax at the bisection's last point still on the starting side
    (|g| within the bisection's resolution of 0, never past it). The label is checked there; 0 where no
    iterate reaches the boundary with the label kept. Each query is its own optimisation, so each model's queries
    step together and a query leaves the loop once its noise is found (``_phase_one_rows``)."""
    noise = torch.zeros_like(z)
    for k in range(z.shape[0]):  # a pool's few models
        own = [(w[k : k + 1], b[k : k + 1]) for w, b in layers]
        noise[k] = _phase_one_rows(z[k : k + 1], own, p)[0]
    return noise


def _phase_one_rows(z: torch.Tensor, layers: Layers, p: MemGuardParams) -> torch.Tensor:
    """``phase_one`` of one model's queries z [1, n, C], stepping only the queries whose noise is not yet found."""
    s = z.softmax(-1)
    label = z.argmax(-1, keepdim=True)
    side = decision(s, layers) > 0
    is_label = F.one_hot(label.squeeze(-1), z.shape[-1]).bool()
    noise = torch.zeros_like(s)
    zz = z.detach().clone()
    active = torch.arange(z.shape[1], device=z.device)
    for _ in range(p.steps):
        if len(active) == 0:
            break
        za, sa, la, sida = zz[:, active], s[:, active], label[:, active], side[:, active]
        with torch.enable_grad():
            za.requires_grad_(True)
            q = za.softmax(-1)
            margin = za.masked_fill(is_label[:, active], float("-inf")).amax(-1) - za.gather(-1, la).squeeze(-1)
            loss = decision(q, layers).abs() + p.c2 * F.relu(margin) + p.c3 * (q - sa).norm(dim=-1)
            (grad,) = torch.autograd.grad(loss.sum(), za)
        with torch.no_grad():
            before = za.detach()
            after = before - p.step_size * grad / grad.norm(dim=-1, keepdim=True).clamp_min(1e-12)
            zz[:, active] = after
            crossed = ((decision(after.softmax(-1), layers) > 0) != sida)[0]
            if bool(crossed.any()):
                rows = crossed.nonzero().squeeze(-1)
                at = boundary(before[:, rows], after[:, rows], sida[:, rows], layers)
                kept = (at.argmax(-1, keepdim=True) == la[:, rows]).squeeze(-1)[0]
                hit = rows[kept]
                noise[:, active[hit]] = at[:, kept].softmax(-1) - sa[:, hit]
                done = torch.zeros(len(active), dtype=torch.bool, device=z.device)
                done[hit] = True
                active = active[~done]
    return noise


def boundary(lo: torch.Tensor, hi: torch.Tensor, side: torch.Tensor, layers: Layers) -> torch.Tensor:
    """Per row, the last point of the segment from logits ``lo`` (g on ``side``) towards ``hi`` that bisection
    finds still on ``side``: g's boundary from the starting side, within 2^-BISECTIONS of the step."""
    a = torch.zeros(lo.shape[:-1], dtype=lo.dtype, device=lo.device)
    b = torch.ones_like(a)
    for _ in range(BISECTIONS):
        mid = 0.5 * (a + b)
        point = lo + mid.unsqueeze(-1) * (hi - lo)
        same = (decision(point.softmax(-1), layers) > 0) == side
        a, b = torch.where(same, mid, a), torch.where(same, b, mid)
    return lo + a.unsqueeze(-1) * (hi - lo)


def classifier_layers(answering: dict[str, torch.Tensor], dtype: torch.dtype) -> Layers:
    """g's layers from a release's answering tensors (``w0``, ``b0``, ``w1``, …)."""
    count = sum(1 for name in answering if name.startswith("w"))
    return [(answering[f"w{i}"].to(dtype), answering[f"b{i}"].to(dtype)) for i in range(count)]


class MemGuard(Defense):
    """Confidence masking at answering time against the defender's own membership classifier (Jia et al. 2019)."""

    name = "memguard"
    version = "2"
    Params = MemGuardParams
    params: MemGuardParams
    honours = RECIPE_FIELDS - {"solver"}
    answers_queries = True
    answers_keep_labels = True  # Phase I keeps the label by construction (checked at the boundary point)
    needs_reference = True

    def fit(self, task: FitTask) -> Fit:
        if task.solver == "newton":
            raise ValueError("memguard trains by gradient steps; solver 'newton' does not apply")
        Xr, _ = task.reference(self.name)
        state = task.train()
        released = Models(task.arch, state)
        members = released.predict_proba(task.X)
        others = released.predict_proba(Xr)
        g = StackedMLP(model_seeds(task, "memguard-classifier"), [task.arch.n_classes, *HIDDEN], task.X.dtype,
                       task.device)
        layers = list(zip(g.weights, g.biases))
        opt = torch.optim.Adam(g.parameters(), lr=0.01)
        for _ in range(400):  # full batch, members and non-members weighted equally
            loss = (F.softplus(-decision(members, layers)).mean(dim=1)
                    + F.softplus(decision(others, layers)).mean(dim=1))
            opt.zero_grad(set_to_none=True)
            loss.sum().backward()
            opt.step()
        answering = {}
        for i, (w, b) in enumerate(layers):
            answering[f"w{i}"], answering[f"b{i}"] = w.detach(), b.detach()
        return Fit(state, None, answering)

    def answer(self, logits: torch.Tensor, answering: dict[str, torch.Tensor]) -> torch.Tensor:
        s = logits.softmax(-1)
        noise = phase_one(logits, classifier_layers(answering, logits.dtype), self.params)
        distortion = noise.abs().sum(-1)
        coin = row_hash(logits, _COIN).to(logits.dtype) / _COIN
        use = coin < (self.params.budget / distortion.clamp_min(1e-12)).clamp(max=1.0)
        answered = torch.where(use.unsqueeze(-1), s + noise, s)
        # s + e is a probability vector (e is a difference of two); its log is the answer's logits
        return answered.clamp_min(torch.finfo(logits.dtype).tiny).log()


@hookimpl
def register_defenses(register) -> None:  # noqa: ANN001
    register(MemGuard)
