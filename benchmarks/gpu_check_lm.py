"""n. The prepared GPU check of the language track: a ~124M-parameter GPT-2 (12 blocks, width 768, GPT-2's 50,257-id
vocabulary, 256-token records; built from a config, nothing downloaded) fine-tuned on CUDA by the arena's LM
trainer, and a tiny GPT-2 trained on the CPU and on CUDA and compared to tolerance.

Figures: seconds per step and peak CUDA memory of non-private full fine-tuning, DP-SGD LoRA fine-tuning and DP-SGD
full fine-tuning (each record's gradient by ``torch.func.vmap(grad)``, ``MICROBATCH`` records at a time); the
largest parameter difference CPU vs CUDA after a few non-private and DP (σ = 0: CUDA's noise stream is not the
CPU's) steps. ``python -m benchmarks --only n --threads 0`` runs it alone (``make gpu-check-lm``); without CUDA it
says so and times nothing on the large model.
"""

from __future__ import annotations

import time

import torch

from arena.contracts.architecture import Architecture
from arena.contracts.recipe import DPNoise, Recipe
from arena.engine.lm import LoRA, train_lm
from arena_plugins.lm_models import GPT2, TinyLMParams
from benchmarks.timing import Check, Section

TOLERANCE = 1e-3
"""Largest |Δ parameter| / largest |parameter| between the devices after training (float32, TF32 off)."""
LARGE = TinyLMParams(layers=12, dim=768, heads=12)
VOCAB, LENGTH = 50_257, 256


def _records(n: int, vocab: int, length: int, device: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, vocab, (1, n, length), generator=g).float().to(device)


def _agreement(device: str) -> float:
    """Largest relative parameter gap between a tiny GPT-2 trained on the CPU and on ``device``."""
    arch = Architecture(GPT2(TinyLMParams(layers=2, dim=64, heads=4)), (32,), 512)
    recipe = Recipe(epochs=2, lr=1e-3, batch_size=16)
    gap = 0.0
    for dp in (None, DPNoise(clip=1.0, noise_multiplier=0.0)):
        cpu = train_lm(arch, _records(64, 512, 32, "cpu"), torch.tensor([1]), torch.tensor([2]), recipe, dp=dp)
        gpu = train_lm(arch, _records(64, 512, 32, device), torch.tensor([1]), torch.tensor([2]), recipe, dp=dp)
        scale = max(float(v.abs().max()) for v in cpu.values())
        gap = max(gap, max(float((cpu[k] - gpu[k].cpu()).abs().max()) for k in cpu) / scale)
    return gap


def _step_seconds(device: str, n: int, batch: int, dp: DPNoise | None, lora: LoRA | None) -> tuple[float, float]:
    """(seconds per optimizer step, peak CUDA memory in GiB) of one epoch over ``n`` records in batches of
    ``batch`` (DP: Poisson batches of expected size ``batch``)."""
    arch = Architecture(GPT2(LARGE), (LENGTH,), VOCAB)
    X = _records(n, VOCAB, LENGTH, device)
    recipe = Recipe(epochs=1, lr=1e-4, batch_size=batch)
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.synchronize()
    start = time.perf_counter()
    train_lm(arch, X, torch.tensor([1]), torch.tensor([2]), recipe, dp=dp, lora=lora)
    torch.cuda.synchronize()
    steps = max(1, n // batch)
    return (time.perf_counter() - start) / steps, torch.cuda.max_memory_allocated() / 2**30


def run(quick: bool, repeats: int) -> Section:
    section = Section("n", "The language track on a GPU: a ~124M-parameter GPT-2",
                      __doc__.split("\n\n")[1] if __doc__ else "")
    if not torch.cuda.is_available():
        section.figures["device"] = "no CUDA device: nothing timed (run on a machine with a GPU)"
        return section
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    section.figures["device"] = torch.cuda.get_device_name(0)
    n_params = sum(p.numel() for p in Architecture(GPT2(LARGE), (LENGTH,), VOCAB).build().parameters())
    section.figures["parameters"] = f"{n_params / 1e6:.1f} M"
    gap = _agreement("cuda")
    section.checks.append(Check("tiny GPT-2, max |CPU − CUDA| / max |param|", gap, TOLERANCE, "<=", unit=""))
    n = 32 if quick else 256
    for label, batch, dp, lora in (
        ("non-private, every weight", 8, None, None),
        ("DP-SGD, LoRA rank 8", 32, DPNoise(clip=1.0, noise_multiplier=1.0), LoRA(8, 16.0)),
        ("DP-SGD, every weight", 8, DPNoise(clip=1.0, noise_multiplier=1.0), None),
    ):
        seconds, memory = _step_seconds("cuda", n, batch, dp, lora)
        section.figures[f"{label}: s/step (batch {batch}), peak GiB"] = f"{seconds:.3f}, {memory:.2f}"
    return section
