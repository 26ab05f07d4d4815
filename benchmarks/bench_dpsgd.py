"""b. Per model-epoch, as a user meets it: the arena non-private and under DP-SGD against a plain torch loop and
Opacus, one model and pools of K, for the CNN and the MLP."""

from __future__ import annotations

from dataclasses import dataclass

import opacus
import torch

from arena.engine import rng
from arena.engine.batching import steps_and_rate
from arena.engine.recipe import DPNoise, Recipe
from arena.engine.trainer import Noise, train
from benchmarks.data import architecture, random_subsets
from benchmarks.peers import opacus_trainer, torch_loop
from benchmarks.timing import CPU, Section, Table, compare, ratio

CNN = architecture("cnn", 1, 8, 8, 10)  # the cnn plugin's defaults: conv 16, conv 32, dense 64
MLP = architecture("mlp", 64, 10, hidden=[256], activation="relu")
NOISE = DPNoise(clip=1.0, noise_multiplier=1.0)
DP_COST = {"cnn": 1.25, "mlp": 1.5}
"""Targets: DP-SGD epoch / non-private epoch at most this, at K = 1 and at the largest K."""
OPACUS_ONE, OPACUS_MANY = 3.0, 5.0
"""Targets (CNN): Opacus per model / arena DP-SGD per model at least this, at K = 1 and at K >= 16."""
MISSED = {
    "loop": (
        "One model alone takes the path without `vmap` (the layer-by-layer path for the CNN, the hand path for the "
        "MLP), so what is left is the work itself. The CNN's step on 8×8 images is a few small convolutions whose "
        "oneDNN kernels dominate both contenders; the arena runs them as grouped convolutions in channels-last "
        "memory with its own bookkeeping (saved inputs for the clipping path, the K-model layout's reshapes), "
        "which at K = 1 costs about what nn.Module's hooks-free forward saves."
    ),
    "cnn-dp": (
        "DP-SGD's step = the non-private work (forward, backward to each layer's output, one weight gradient of "
        "the clip-scaled output gradients) + the per-example norms + the noise. At K ≥ 16 the norms are most of "
        "the extra (profile of one K = 16 step: first convolution's per-example gradient, unfold + batched matmul "
        "after a copy of its output gradient out of channels-last memory, ~7.6 ms; the second convolution's ghost "
        "norm, Gram matrix of its input summed over 9 kernel offsets, ~5.5 ms; against a whole non-private step "
        "of ~31 ms), then the Poisson batch padded to the largest count among the K models (~1.3× the mean at "
        "q = 64/1000, K = 64) and the counter RNG (figure above). What would close it: fused kernels for the two "
        "convolutions' norms (torch.compile or a C++ op; eager torch cannot fuse the unfold, the copy and the "
        "reduction) and splitting a step's models by sampled batch size."
    ),
    "mlp-dp": (
        "The MLP's non-private step on the hand path is a handful of small batched matmuls, so DP-SGD's additions "
        "weigh heavily: one Gaussian per parameter per step (19,210 per model; the counter RNG's figure above is "
        "most of the extra time: a 64-bit hash and Box–Muller in ~20 eager passes, ~1.8× torch.randn per normal), "
        "the ghost norms and the Poisson batch padded to the largest count of the chunk. What would close it: a "
        "fused hash + Box–Muller kernel (one pass instead of ~20); torch.compile of it was tried on this machine "
        "and rejected: 133 s to compile on first use and its int64 hash did not reproduce eager torch's words."
    ),
    "opacus": (
        "Opacus's hooks form this small CNN's per-example gradients with one einsum per layer, which is cheap, so "
        "3× (5×) Opacus asks for an arena DP-SGD epoch below a plain torch loop's non-private epoch; the arena's "
        "DP epoch costs its own non-private epoch plus the per-example norms and the noise (see the DP-SGD / "
        "non-private figure and its explanation). Closing that gap closes this one."
    ),
}


@dataclass(frozen=True)
class Sizes:
    n: int
    epochs: int
    models: tuple[int, ...]
    peers: int
    """Models the torch loop and Opacus train per repeat (one after another: their cost per model does not
    depend on K), at most K."""


FULL = Sizes(n=1000, epochs=1, models=(1, 16, 64), peers=4)
QUICK = Sizes(n=128, epochs=1, models=(1, 4), peers=1)


def recipe(epochs: int, batch: int = 64) -> Recipe:
    return Recipe(epochs=epochs, lr=0.1, momentum=0.9, batch_size=batch)


def rng_seconds_per_epoch(arch, n: int, K: int) -> float:
    """CPU seconds the counter RNG alone takes for one DP epoch of K models, drawn as the trainer draws them (the
    Poisson masks of several steps per call, the noise through ``trainer.Noise``)."""
    steps, q = steps_and_rate(n, recipe(1))
    seeds = rng.Keys(torch.arange(K, dtype=torch.int64))
    start = CPU()
    rng.bernoulli(seeds, [rng.stream(rng.Purpose.POISSON, t) for t in range(steps)], n, q)
    noise = Noise(seeds, steps, arch.template().n_params, torch.float32)
    for t in range(steps):
        noise(t)
    return CPU() - start


def randn_seconds_per_epoch(arch, n: int, K: int) -> float:
    """The same number of normals from torch.randn (the global Mersenne Twister: not counter-based)."""
    steps, _ = steps_and_rate(n, recipe(1))
    out = torch.empty(K, arch.template().n_params)
    start = CPU()
    for _ in range(steps):
        out.normal_()
    return CPU() - start


def _pair(name: str, arch, K: int, sizes: Sizes, repeats: int, section: Section) -> None:
    X, y = random_subsets("digits", sizes.n, K)
    seeds = torch.arange(K, dtype=torch.int64)
    m = min(K, sizes.peers)
    loops = [torch_loop(arch, X[k], y[k], recipe(1), k) for k in range(m)]
    hooks = [opacus_trainer(arch, X[k], y[k], recipe(1), NOISE, "hooks", k) for k in range(m)]
    nonprivate, private = f"arena non-private, K={K} in one call", f"arena DP-SGD, K={K} in one call"
    loop, opac = f"torch loop, one model after another ({m} timed)", f"Opacus hooks, one after another ({m} timed)"

    def epochs(r: int) -> int:
        return 1 if r < 0 else sizes.epochs

    t = compare(
        {
            nonprivate: lambda r: train(arch, X, y, recipe(epochs(r)), seeds, seeds),
            private: lambda r: train(arch, X, y, recipe(epochs(r)), seeds, seeds, dp=NOISE),
            loop: lambda r: [f(epochs(r)) for f in loops],
            opac: lambda r: [f(epochs(r)) for f in hooks],
        },
        repeats,
        scale={nonprivate: 1 / (sizes.epochs * K), private: 1 / (sizes.epochs * K), loop: 1 / (sizes.epochs * m),
               opac: 1 / (sizes.epochs * m)},
        clock=CPU,
    )
    section.tables.append(Table(f"{name}, K={K}; CPU seconds per model-epoch", t, "s/model-epoch"))
    if K == 1:
        section.checks.append(ratio(f"{name}: torch loop / arena non-private, one model", t, loop, nonprivate, 1.0,
                                    why_missed=MISSED["loop"]))
    if K in (1, sizes.models[-1]):
        section.checks.append(ratio(f"{name}: DP-SGD / non-private, K={K}", t, private, nonprivate, DP_COST[name],
                                    op="<=", why_missed=MISSED[f"{name}-dp"]))
    if name == "cnn":
        section.checks.append(ratio(f"cnn: Opacus / arena DP-SGD per model, K={K}", t, opac, private,
                                    OPACUS_ONE if K == 1 else OPACUS_MANY, why_missed=MISSED["opacus"]))
    share, randn = rng_seconds_per_epoch(arch, sizes.n, K) / K, randn_seconds_per_epoch(arch, sizes.n, K) / K
    extra = t.median(private) - t.median(nonprivate)
    section.figures[f"{name}, K={K}: counter RNG alone (Poisson masks + noise), per model-epoch"] = (
        f"{share * 1e3:.2f} ms (torch.randn for the same normals: {randn * 1e3:.2f} ms) of the DP epoch's "
        f"{t.median(private) * 1e3:.2f} ms; the DP epoch's extra time over non-private: {extra * 1e3:.2f} ms"
    )


def run(quick: bool, repeats: int) -> Section:
    sizes = QUICK if quick else FULL
    section = Section(
        "b",
        "Per model-epoch: arena non-private and DP-SGD vs a torch loop vs Opacus",
        f"Digits, n = {sizes.n} records per model (each model its own random subset), batch 64 (DP-SGD: Poisson "
        f"sampling at q = 64/n, clip 1, σ 1), SGD lr 0.1 momentum 0.9, {sizes.epochs} epoch(s) per call, CPU "
        f"seconds per model-epoch. Models: the `cnn` plugin on 1×8×8 ({CNN.template().n_params:,} parameters; "
        "layer-by-layer path, DP-SGD by ghost clipping, arena/engine/ghost.py) and the MLP 64→256→10 relu "
        f"({MLP.template().n_params:,} parameters; hand path, arena/engine/dense.py). The arena trains K models in "
        "one `train` call (K = 1: one model alone, which skips `vmap`); the torch loop (a plain nn.Module + "
        f"torch.optim.SGD, a fresh randperm per epoch) and Opacus {opacus.__version__} (`make_private`, Poisson "
        "DPDataLoader, 'hooks' per-sample gradients, set-up outside the timing) train one model after another, "
        f"so their cost per model does not depend on K: {sizes.peers} models are timed per repeat at most. Every "
        "arena random number comes from the counter RNG (a model trains the same alone or in a batch).",
    )
    for name, arch in (("cnn", CNN), ("mlp", MLP)):
        for K in sizes.models:
            _pair(name, arch, K, sizes, repeats, section)
    return section
