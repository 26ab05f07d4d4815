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
        "autograd backward), the MLP the hand path. The arena keeps every image tensor and its gradient in "
        "channels-last memory, where this torch build's max-pooling runs ~4× faster than on the loop's NCHW tensors "
        "(3 epochs profiled on a 2-core AMD EPYC machine: 5.7 against 24 ms). On that machine (AVX2) the other "
        "layers give that back: in channels-last the convolutions ran slower than the loop's NCHW ones (forward 31 "
        "against 23 ms, backward 54 against 47 ms), the ReLU backward 12 against 3.2 ms, and the linear layers as "
        "batched matmuls 11 against 8 ms; the two are at parity there (16 epochs per call, 5 repeats, 2026-12-02: "
        "1.12×, per repeat 0.96–1.24×), and on the Intel machine of earlier runs (AVX-512) the same code measured "
        "1.01× and 0.99–1.04× over 25 interleaved epochs. Issue 23's twelfth round took a grey first layer's "
        "gradient at its output when one model trains (its forward and its weight sum in C, no Python backward): "
        "on a 2-core AMD EPYC 1.06–1.09× across runs became 1.13–1.18×. What is left besides: the per-call "
        "seeded initialisation (~0.9 ms), the per-model gathers of each batch (counter-RNG shuffles), the "
        "reshapes. What would close it: picking the memory format per layer at K = 1 (NCHW convolutions, "
        "channels-last pooling) by timing both once per machine."
    ),
    "cnn-dp": (
        "DP-SGD's step = a forward and backward to each layer's output + the per-example norms (one C kernel a "
        "convolution, arena/engine/conv_kernel.py; the dense head's in the dense kernel) + the clipped sums (a "
        "ghost-normed convolution's in C) + the noise, on Poisson batches of unequal sizes, in passes of at most "
        "ARENA_PASS_MB of activations (~13 models of this CNN) sorted by Poisson count and cut where padding plus a "
        "pass's fixed cost is least (batching.model_passes). Issue 23's twelfth round clipped the dense head in one "
        "C call fed the convolutions' norms and summed the second convolution's clipped weight gradients in C "
        "(1.68 against oneDNN's 2.11 ms at K = 16): on a 2-core AMD EPYC the K = 64 figure went from 1.17–1.26× "
        "across runs to 1.16–1.21× (single repeats 0.96–1.25×), K = 1 to 1.04–1.15×. What is left at K = 64: the "
        "norm kernels (~0.7 and ~1.0 µs an example in a step, ~14 % of it; their maps come from L3 after the "
        "backward), the ~4 % padding, the schedule's 16 steps of expected 64 (1,024 rows an epoch against the "
        "non-private 1,000), the passes' gathers of models sorted by count (~0.3 ms a model-epoch more than "
        "non-private's slices). What might close it: a ghost-norm kernel nearer the machine's peak (its "
        "transposes are ~0.2 of its 0.73 µs an example in isolation) and one gather and scatter a step instead "
        "of one a pass."
    ),
    "mlp-dp": (
        "The MLP's non-private step on the hand path is a handful of small batched matmuls, so DP-SGD's fixed "
        "additions weigh heavily. Since issue 23's seventh round they are two C calls a step: the clipping kernel "
        "(arena/engine/dense_kernel.py: each example's ghost norm over all layers, its clip factor, the factors "
        "times each layer's narrower side and the bias sums, while the example's rows are in cache; only the "
        "weight gradients' batched matmuls stay in torch) and the noise kernel, which adds σC·z into the gradient "
        "sums as it draws z and takes the heavy-ball step in the same pass (arena/engine/rng_kernel.py; the "
        "normals are never written out). On a quiet 2-core Intel Xeon (AVX-512) machine that took the ratios from "
        "1.76× (K = 1) and 1.65× (K = 64) to 1.44× and 1.51× (5 repeats each, 2026-12-02; K = 64's repeats "
        "1.43–1.56×, one outlying non-private repeat aside): K = 1 passes, K = 64 sits at the target. What is "
        "left at K = 64: (1) the Poisson batch padded to the largest of K counts (~83 rows per step for an expected "
        "64: 1.3× the rows of every matmul, ~1 ms of a ~10 ms step; cutting it into two passes, "
        "batching.tail_split, measured slower on this path, and torch's CPU grouped matmul over ragged rows was no "
        "faster than the padded bmm); (2) the clipping kernel's pass over every example's activations and deltas "
        "(~14 MB a step, memory-bound, ~1 ms); (3) the 1.23 million normals' arithmetic (~0.75 ns each). What "
        "would close it: a grouped matmul over ragged batches (no padding), and the step in chunks of models "
        "small enough for the activations to stay in cache between the backward pass and the clipping."
    ),
    "opacus": (
        "Opacus's hooks form this small CNN's per-example gradients with one einsum per layer, which is cheap, so "
        "3× at K = 1 asks for an arena DP-SGD epoch of one model within ~15 % of the arena's own non-private epoch, "
        "itself about a plain torch loop's. Issue 23's eleventh round ran the first, one-channel layer's forward "
        "in C (arena/engine/conv_forward.py), the twelfth clipped the dense head in one C call (the linear layers' "
        "norms, the factors, the scaled sides and the bias sums: ~75 µs of small tensor calls a step) and summed "
        "the second convolution's clipped weight gradients in C (107 against oneDNN's 175 µs): on a 2-core AMD "
        "EPYC the figure went from 2.83–3.05× across runs to 3.16–3.34× (single repeats 3.03–3.49×). Opacus's own "
        "epoch varies ~7 % between runs. What is left of a DP-SGD step of one model (~1.44 ms against ~1.33 "
        "non-private): the two norm-kernel calls, the Python of the layer-by-layer path (~10 µs a layer), the noise "
        "call's layout checks (~20 µs of its 30). At K ≥ 16 the passes of the tenth round reached the 5× target."
    ),
}


@dataclass(frozen=True)
class Sizes:
    n: int
    model_epochs: int
    """Model-epochs one timed arena call trains at least: K models train ⌈model_epochs / K⌉ epochs per call (one at
    least), so that a figure of one model is not one ~60 ms epoch, which the machine's noise swamps."""
    models: tuple[int, ...]
    peers: int
    """Models the torch loop and Opacus train per repeat (one after another: their cost per model does not
    depend on K), at most K."""

    def epochs(self, K: int) -> int:
        """Epochs per timed call for K models (every contender of the pair trains as many)."""
        return max(1, -(-self.model_epochs // K))


FULL = Sizes(n=1000, model_epochs=16, models=(1, 16, 64), peers=4)
QUICK = Sizes(n=128, model_epochs=1, models=(1, 4), peers=1)


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

    per_call = sizes.epochs(K)

    def epochs(r: int) -> int:
        return 1 if r < 0 else per_call

    t = compare(
        {
            nonprivate: lambda r: train(arch, X, y, recipe(epochs(r)), seeds, seeds),
            private: lambda r: train(arch, X, y, recipe(epochs(r)), seeds, seeds, dp=NOISE),
            loop: lambda r: [f(epochs(r)) for f in loops],
            opac: lambda r: [f(epochs(r)) for f in hooks],
        },
        repeats,
        scale={nonprivate: 1 / (per_call * K), private: 1 / (per_call * K), loop: 1 / (per_call * m),
               opac: 1 / (per_call * m)},
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
        f"sampling at q = 64/n, clip 1, σ 1), SGD lr 0.1 momentum 0.9, "
        f"{', '.join(f'{sizes.epochs(K)} epoch(s) per call at K = {K}' for K in sizes.models)} (an arena call "
        f"trains {sizes.model_epochs} model-epochs at least; the peers train as many epochs per model), CPU seconds "
        f"per model-epoch. Models: the `cnn` plugin on 1×8×8 ({CNN.template().n_params:,} parameters; "
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
