"""g. The torch.func path vs the hand-written path on the same MLP: why `engine="auto"` picks the hand path for
dense models."""

from __future__ import annotations

import torch

from arena.engine.trainer import train
from benchmarks.bench_dpsgd import FULL, MLP, NOISE, QUICK, recipe
from benchmarks.data import random_subsets
from benchmarks.timing import CPU, Section, Table, compare, ratio

TARGET = 1.0
MISSED = (
    "The hand path would be slower than torch.func here, so `choose_engine` should prefer torch.func for dense "
    "models at this size."
)


def run(quick: bool, repeats: int) -> Section:
    sizes = QUICK if quick else FULL
    K = sizes.models[-1]
    per_call = sizes.epochs(K)
    section = Section(
        "g",
        "torch.func path vs hand path (MLP)",
        f"The same {K} MLPs 64→256→10 relu on digits (n = {sizes.n}, batch 64, lr 0.1, momentum 0.9, "
        f"{per_call} epoch(s)) trained by `train(..., engine=\"functional\")` (torch.func: `vmap` over models "
        "of `grad`, and for DP-SGD `vmap(grad)` over examples, materialised per-example gradients) and by "
        "`engine=\"dense\"` (hand-written batched backprop, ghost norms for DP-SGD); same seeds, same draws, so "
        "the models agree to float tolerance (figure below). CPU time per epoch per model.",
    )
    X, y = random_subsets("digits", sizes.n, K)
    seeds = torch.arange(K, dtype=torch.int64)

    def epochs(r: int) -> int:
        return 1 if r < 0 else per_call

    scale = 1.0 / (per_call * K)
    for dp, label in ((None, "non-private"), (NOISE, "DP-SGD")):
        func, dense = f"torch.func, {label}", f"hand path, {label}"
        t = compare(
            {
                func: lambda r, dp=dp: train(MLP, X, y, recipe(epochs(r)), seeds, seeds, dp=dp, engine="functional"),
                dense: lambda r, dp=dp: train(MLP, X, y, recipe(epochs(r)), seeds, seeds, dp=dp, engine="dense"),
            },
            repeats,
            scale={func: scale, dense: scale},
            clock=CPU,
        )
        section.tables.append(Table(f"{label}, K={K}; CPU seconds per epoch per model", t, "s/epoch/model"))
        section.checks.append(ratio(f"MLP {label}: torch.func / hand path, K={K}", t, func, dense, TARGET,
                                    why_missed=MISSED))
        a, b = t.results[func][-1], t.results[dense][-1]
        section.figures[f"{label}: max |Δ parameter|, torch.func vs hand path"] = (
            f"{max(float((a[k] - b[k]).abs().max()) for k in a):.1e}")
    return section
