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
        "One model alone skips `vmap`: the CNN takes the layer-by-layer path (arena/engine/ghost.py's forward, one "
        "autograd backward), the MLP the hand path. Its gradient on a batch of 64 now costs ~0.97× the torch "
        "loop's forward and backward: the arena keeps every image tensor and its gradient in channels-last memory, "
        "where this torch build's max-pooling runs ~10× faster than on the loop's NCHW tensors (a one-channel "
        "input used to give NCHW output, and the Flatten's gradient came back in NCHW: a mixed-layout pooling and "
        "ReLU backward ran 10-30× slower), against the bookkeeping of the K-model layout (reshapes, the grouped "
        "convolution's weight reordering). Side by side in one process, 25 interleaved epochs, the ratio measured "
        "0.99–1.04× (0.85–0.90× before these changes); a single 40–60 ms epoch per repeat on a machine shared "
        "with other sessions' jobs spreads from 0.7× to 1.5× (see the row). What is left: the per-call seeded "
        "initialisation (~0.9 ms), the per-model gathers of each batch (counter-RNG shuffles), the reshapes."
    ),
    "cnn-dp": (
        "DP-SGD's step = a forward and backward to each layer's output + the per-example norms + the clipped sums "
        "+ the noise, on Poisson batches padded to the largest of K counts (~83 rows for an expected 64 at "
        "K = 64; cut in two passes where that saves rows). Measured on one K = 64 pass of 80 rows (CPU, one "
        "thread, after this round's changes): forward and backward 80-110 ms; per-example norms 31-45 ms, "
        "nearly all the two convolutions' (the first's materialised per-example gradients 12-17 ms: its input "
        "unfolded, its output gradient copied out of channels-last memory, a batched matmul; the second's ghost "
        "norm 14-21 ms: the input Gram matrices, one product with the 4×4 map's pair map, the output Gram "
        "matrices); the clipped sums 14-22 ms (the second convolution's batched weight gradient most of it). "
        "This round cut the norms from ~70 ms on that pass (the output gradient laid out positions first: a "
        "quarter of the copy, a product twice as fast; a strided unfold instead of im2col; the pair map instead "
        "of nine strided sub-block sums, which at K = 1 also saves their per-offset calls): the whole pass ~22% "
        "cheaper at K = 64, 5-10% at K = 1. Side by side in one process (5 interleaved epochs, after this round) "
        "the ratio measured 1.50-1.51× at K = 1 and 1.85-1.99× at K = 64; single epochs on this shared machine "
        "spread far wider (see the rows). A separable pair map (rows and columns apart) was tried and not kept: "
        "its 5-d transposes cost what the sums saved. The counter RNG is ~0.5-1 ms per model-epoch since its "
        "compiled kernel (figure above), and DP-SGD's 1/B and momentum passes were folded (issue 23's fourth round): "
        "measured in alternating processes against the tree before that round (5 epochs each, CPU time), the ratio "
        "went from 1.46-1.48× to 1.42-1.43× at K = 1 and from 1.64-2.00× to 1.56-1.64× at K = 64 (one run's K = 64 "
        "figure spreads 1.45-2.06× over its repeats on this machine). "
        "What would close it: fused kernels for the convolutions' norms (eager torch cannot fuse the layout copy, "
        "the unfold and the reduction, and has no matmul batched over two strided axes)."
    ),
    "mlp-dp": (
        "The MLP's non-private step on the hand path is a handful of small batched matmuls, so DP-SGD's fixed "
        "additions weigh heavily. (1) The noise: one Gaussian per parameter per step (19,210 per model). Since "
        "issue 23's fourth round the counter RNG's integer work (SplitMix64, the Box-Muller fields, the Poisson "
        "coins and the rows they sample) is one pass of compiled C (arena/engine/rng_kernel.py, the same bits as "
        "the eager passes), ~3× cheaper than before and at most torch.randn's cost for the same normals, half of it"
        " at K ≥ 16 (figure above); what is left of it are the seven float32 passes of log, sqrt, sin, cos and "
        "products, which stay in torch so that a draw is the same with or without the kernel. A whole Box-Muller in"
        " C, from exact IEEE operations only (polynomial log, sin and cos, so that an eager fallback could "
        "reproduce its bits; a new stream), was prototyped and not kept: vectorised in float32 it drew 64 models' "
        "1.23 M normals in 1.9 ms against 2.4 ms for the kernel plus torch's passes, 1.3× (float64: 5.4 ms, "
        "slower). (2) Without the RNG the DP epoch is still ~1.45-1.65× non-private at K = 64 (figure above): the "
        "Poisson batch padded to the largest of K counts (~83 rows per step against an expected 64: 1,323 rows per "
        "model-epoch against 1,000), the ghost norms, the weighted sums. Grouping the models by sampled size would "
        "cut the padded rows by ~13% here (simulated: sorted into two groups), but on this path each group needs "
        "its models' weights gathered and its sums scattered back (two passes over 64 models' parameters a step), "
        "and cutting the batch in two passes was measured no faster before (8.68 vs 8.82 ms per model-epoch). (3) "
        "At K = 1 a DP step runs ~25 eager calls more than a non-private one, each 3-6 µs here; measured per step "
        "(one thread): noise ~60-80 µs, per-example norms and clip factors ~70-95 µs, the weighted sums ~15-30 µs "
        "over the plain ones, the noise added ~35 µs, against a whole non-private step of ~330 µs. Against the tree"
        " before this round, in alternating processes (5 epochs each, CPU time), the ratio went from 1.90-2.12× to "
        "1.81-1.83× at K = 1 (both epochs cheaper: the non-private one by the momentum pass saved) and from "
        "2.63-2.79× to 1.78-1.79× at K = 64. What would close it: a fused step (torch.compile was tried for the "
        "generator and rejected: 133 s to compile on first use, and its int64 hash did not reproduce eager torch's "
        "words), and less padding (a grouped matmul over ragged batches)."
    ),
    "opacus": (
        "Opacus's hooks form this small CNN's per-example gradients with one einsum per layer, which is cheap, so "
        "3× at K = 1 asks for an arena DP-SGD epoch well below a plain torch loop's non-private epoch, and 5× at "
        "K ≥ 16 for a DP epoch about as cheap as the arena's own non-private one; the arena's DP epoch is its "
        "non-private epoch plus the per-example norms and the noise (see the DP-SGD / non-private figure and its "
        "explanation). Closing that gap closes this one."
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


def rng_seconds_per_epoch(arch, n: int, K: int, batch: int = 64) -> float:
    """CPU seconds the counter RNG alone takes for one DP epoch of K models, drawn as the trainer draws them (the
    Poisson samples' rows of several steps per call, the noise through ``trainer.Noise``)."""
    steps, q = steps_and_rate(n, recipe(1, batch))
    seeds = rng.Keys(torch.arange(K, dtype=torch.int64))
    start = CPU()
    rng.sampled_rows(seeds, [rng.stream(rng.Purpose.POISSON, t) for t in range(steps)], n, q)
    noise = Noise(seeds, steps, arch.template().n_params, torch.float32)
    for t in range(steps):
        noise(t)
    return CPU() - start


def randn_seconds_per_epoch(arch, n: int, K: int, batch: int = 64) -> float:
    """The same number of normals from torch.randn (the global Mersenne Twister: not counter-based)."""
    steps, _ = steps_and_rate(n, recipe(1, batch))
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
        f"{t.median(private) * 1e3:.2f} ms; the DP epoch's extra time over non-private: {extra * 1e3:.2f} ms; "
        f"the DP epoch less the RNG: {(t.median(private) - share) / t.median(nonprivate):.2f}× non-private"
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
