"""m. The language track's DP fine-tuning step against Opacus on the same tiny causal LM: one DP-SGD step (each
record's gradient clipped to C, the sum, Gaussian noise) of LoRA fine-tuning on a 2-block Llama (width 64,
64-token records), by the arena (``arena.engine.lm.clipped_sum``: ``torch.func.vmap(grad)`` over the LoRA matrices)
and by Opacus' ``GradSampleModule`` + ``DPOptimizer`` (per-sample gradients from its hooks on the LoRA ``nn.Linear``
layers; the frozen base has no trainable parameter, so Opacus samples nothing else). Both take the same batches;
with σ = 0 their clipped sums agree to float32 precision (checked). GPT-2's fused ``Conv1D`` has no Opacus sampler,
which is why the pair uses the Llama."""

from __future__ import annotations

import warnings

import opacus
import torch
from opacus.optimizers import DPOptimizer

from arena.contracts.architecture import Architecture
from arena.engine.lm import LoRA, clipped_sum, example_nll, with_lora
from arena_plugins.lm_models import Llama, TinyLMParams
from benchmarks.timing import CPU, Check, Section, Table, compare, ratio

V, L, B = 512, 64, 64
CLIP = 1.0
TARGET = 1.0
"""Target: Opacus' step / the arena's step at least this (the arena's step is no slower than Opacus')."""


def _model(seed: int) -> torch.nn.Module:
    arch = Architecture(Llama(TinyLMParams(layers=2, dim=64, heads=4)), (L,), V)
    torch.manual_seed(seed)
    return with_lora(arch.build(), LoRA(rank=8, alpha=16.0)).train()


def _batches(n: int, size: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, V, (size, L), generator=g).float() for _ in range(n)]


def arena_step(model: torch.nn.Module, X: torch.Tensor, sigma: float) -> dict[str, torch.Tensor]:
    named = {n: p for n, p in model.named_parameters() if p.requires_grad}
    total, _ = clipped_sum(model, {k: v.detach() for k, v in named.items()}, X, CLIP)
    return {k: total[k] + sigma * CLIP * torch.randn_like(total[k]) for k in named}


class OpacusStep:
    """Opacus' DP-SGD step on the same model: per-sample gradients by its hooks, clipping, sum and noise in its
    ``DPOptimizer`` (no optimiser update: the summed noisy gradient is what is compared)."""

    def __init__(self, model: torch.nn.Module, sigma: float) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.module = opacus.GradSampleModule(model, batch_first=True, loss_reduction="sum")
        params = [p for p in self.module.parameters() if p.requires_grad]
        self.optimizer = DPOptimizer(torch.optim.SGD(params, lr=0.0), noise_multiplier=sigma, max_grad_norm=CLIP,
                                     expected_batch_size=B, loss_reduction="sum")
        self.names = [n.removeprefix("_module.") for n, p in self.module.named_parameters() if p.requires_grad]

    def __call__(self, X: torch.Tensor) -> dict[str, torch.Tensor]:
        self.optimizer.zero_grad(set_to_none=True)
        with warnings.catch_warnings():  # the embedding is frozen: no input of a hooked layer needs a gradient
            warnings.simplefilter("ignore", UserWarning)
            example_nll(self.module, X).sum().backward()
        self.optimizer.pre_step()  # clip, sum, add noise (what step() does before the update)
        params = [p for p in self.module.parameters() if p.requires_grad]
        return {n: p.grad.detach().clone() for n, p in zip(self.names, params)}  # loss_reduction "sum": the sum


def run(quick: bool, repeats: int) -> Section:
    steps = 2 if quick else 10
    batches = _batches(steps, 8 if quick else B)
    section = Section(
        "m", "DP fine-tuning of a tiny causal LM (LoRA): the arena's step against Opacus",
        f"One DP-SGD step of LoRA (rank 8) fine-tuning of a 2-block Llama of width 64 on {len(batches[0])} records of "
        f"{L} tokens (vocabulary {V}), {steps} steps per call, σ = 1, C = {CLIP}, in CPU seconds of this process: "
        "the arena's `clipped_sum` (`torch.func.vmap(grad)` over the LoRA matrices, 32 records at a time) and "
        "Opacus' `GradSampleModule` hooks with its `DPOptimizer`'s clipping and noise.")
    ours, theirs = _model(1), OpacusStep(_model(1), sigma=1.0)
    timings = compare({
        "arena": lambda _r: [arena_step(ours, X, 1.0) for X in batches],
        "opacus": lambda _r: [theirs(X) for X in batches],
    }, repeats, clock=CPU, scale={"arena": 1.0 / steps, "opacus": 1.0 / steps})
    section.tables.append(Table("seconds per DP step", timings, "s"))
    section.checks.append(ratio("Opacus step / arena step", timings, "opacus", "arena", TARGET, why_missed=(
        "Opacus computes each LoRA layer's per-sample gradient from its hooks as one einsum of the layer's input and "
        "output gradient; the arena runs the whole model's forward and backward under vmap per record group, which "
        "costs more when only a few small matrices train.")))
    exact = OpacusStep(_model(2), sigma=0.0)(batches[0])
    mine = arena_step(_model(2), batches[0], 0.0)
    gap = max(float((mine[k] - exact[k]).abs().max()) for k in mine)
    scale = max(float(v.abs().max()) for v in mine.values())
    section.checks.append(Check("max |arena − Opacus| / max |sum|, σ = 0", gap / scale, 1e-4, "<=", unit=""))
    return section
