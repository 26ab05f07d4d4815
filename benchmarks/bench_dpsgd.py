"""b. A DP-SGD epoch vs a non-private epoch of the same engine (the CNN and the MLP), and where the extra time goes."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from arena.engine import rng
from arena.engine.batching import steps_and_rate
from arena.engine.recipe import DPNoise, Recipe
from arena.engine.trainer import choose_engine, train
from benchmarks.data import architecture, random_subsets
from benchmarks.timing import CPU, Section, Table, compare, ratio

CNN = architecture("cnn", 1, 8, 8, 10)  # the cnn plugin's defaults: conv 16, conv 32, dense 64
MLP = architecture("mlp", 64, 10, hidden=[256], activation="relu")
NOISE = DPNoise(clip=1.0, noise_multiplier=1.0)
TARGETS = {"cnn": 2.0, "mlp": 1.5}
MISSED = {
    "cnn": (
        "Non-private training takes the torch.func path (`vmap` over models of `grad`); DP-SGD on the CNN takes the "
        "ghost-clipping path (arena/engine/ghost.py): one forward of all K models (grouped convolutions in "
        "channels-last memory), one backward to each layer's output, per-example norms (the first convolution's "
        "per-example gradient formed with an unfold and a batched matmul, the second's ghost norm from the input's "
        "Gram matrix, the dense layers' from ||a||·||δ||), then one batched weight gradient of the clip-scaled output "
        "gradients. Its remaining extra cost over a non-private step: the Poisson batch padded to the largest sampled "
        "count (~1.25× rows at K=64), the norms (the copy of the first convolution's output gradient, [B, K·16, 8, 8], "
        "from channels-last into per-example layout is the largest item), and the counter RNG (figure above)."
    ),
    "mlp": (
        "Per step, DP-SGD on the hand path does the non-private work on a padded Poisson batch (each chunk is "
        "padded to its largest sampled batch: at q = 64/1000 the largest of 64 binomial counts is ~1.3× the mean), "
        "plus ghost norms (two small reductions per layer) and one Gaussian per parameter. The Gaussian is the "
        "counter RNG (figure above): one SplitMix64 hash per two normals, then Box–Muller, ~20 eager in-place "
        "passes; at K=64 it costs ~2× torch.randn's Mersenne Twister for the same normals and about half of the "
        "DP epoch's extra time, at K=1 its ~30 small operations per draw cost more than the arithmetic. The "
        "previous lowbias32 generator cost ~1.5× this one. What would close it: a fused kernel for hash + "
        "Box–Muller (one pass instead of ~20: torch.compile or a small C++/Triton op; eager torch cannot fuse), "
        "and less padding (e.g. splitting a chunk's models by sampled batch size at each step)."
    ),
}


@dataclass(frozen=True)
class Sizes:
    n: int
    epochs: int
    models: tuple[int, ...]


FULL = Sizes(n=1000, epochs=1, models=(1, 64))
QUICK = Sizes(n=128, epochs=1, models=(1, 4))


def recipe(epochs: int, batch: int = 64) -> Recipe:
    return Recipe(epochs=epochs, lr=0.1, momentum=0.9, batch_size=batch)


def rng_seconds_per_epoch(arch, n: int, K: int, draws: int = 10) -> float:
    """CPU seconds the counter RNG alone takes for one DP epoch of K models: a Poisson mask and a noise draw per
    step, as the trainer draws them (prepared keys, one reused workspace)."""
    steps, q = steps_and_rate(n, recipe(1))
    seeds, ws = rng.Keys(torch.arange(K, dtype=torch.int64)), rng.Workspace()
    P = arch.template().n_params
    start = CPU()
    for t in range(draws):
        rng.bernoulli(seeds, rng.stream(rng.Purpose.POISSON, t), n, q)
        rng.normal(seeds, rng.stream(rng.Purpose.NOISE, t), P, workspace=ws)
    return (CPU() - start) / draws * steps


def randn_seconds_per_epoch(arch, n: int, K: int, draws: int = 10) -> float:
    """The same number of normals from torch.randn (the global Mersenne Twister: not counter-based)."""
    steps, _ = steps_and_rate(n, recipe(1))
    out = torch.empty(K, arch.template().n_params)
    start = CPU()
    for _ in range(draws):
        out.normal_()
    return (CPU() - start) / draws * steps


def run(quick: bool, repeats: int) -> Section:
    sizes = QUICK if quick else FULL
    section = Section(
        "b",
        "DP-SGD epoch vs non-private epoch",
        f"The engine's `train` on digits, n = {sizes.n} records per model, batch 64, lr 0.1, momentum 0.9, "
        f"{sizes.epochs} epoch(s) per call; CPU time per epoch per model. Models: the `cnn` plugin on 1×8×8 "
        f"({CNN.template().n_params:,} parameters; torch.func path, DP-SGD by ghost clipping) "
        "and the MLP 64→256→10 relu "
        f"({MLP.template().n_params:,} parameters; hand path). Non-private: a fresh shuffle per epoch cut into "
        "batches of 64. DP-SGD (dp=DPNoise(clip 1, σ 1)): Poisson sampling at q = 64/n, per-example clipping "
        "(ghost norms: on the hand path for the MLP, arena/engine/ghost.py for the CNN), "
        "Gaussian noise on the clipped sum, "
        "every random number from the counter RNG (so a model trains identically alone or in a batch). Same "
        "number of steps per epoch (⌈n/64⌉).",
    )
    for name, arch in (("cnn", CNN), ("mlp", MLP)):
        for K in sizes.models:
            X, y = random_subsets("digits", sizes.n, K)
            seeds = torch.arange(K, dtype=torch.int64)
            nonprivate, private = f"{name} non-private, K={K}", f"{name} DP-SGD, K={K}"

            def epochs(r: int) -> int:
                return 1 if r < 0 else sizes.epochs

            per_model_epoch = 1.0 / (sizes.epochs * K)
            t = compare(
                {
                    nonprivate: lambda r, X=X, y=y, seeds=seeds, arch=arch: train(
                        arch, X, y, recipe(epochs(r)), seeds, seeds),
                    private: lambda r, X=X, y=y, seeds=seeds, arch=arch: train(
                        arch, X, y, recipe(epochs(r)), seeds, seeds, dp=NOISE),
                },
                repeats,
                scale={nonprivate: per_model_epoch, private: per_model_epoch},
                clock=CPU,
            )
            section.tables.append(Table(
                f"{name} ({choose_engine(arch)} path), {K} model(s) per call; CPU seconds per epoch per model", t,
                "s/epoch/model"))
            section.checks.append(ratio(f"{name}: DP-SGD / non-private epoch, K={K}", t, private, nonprivate,
                                        TARGETS[name], op="<=", why_missed=MISSED[name]))
            share, randn = rng_seconds_per_epoch(arch, sizes.n, K) / K, randn_seconds_per_epoch(arch, sizes.n, K) / K
            extra = t.median(private) - t.median(nonprivate)
            section.figures[f"{name}, K={K}: counter RNG alone (Poisson masks + noise), per epoch per model"] = (
                f"{share * 1e3:.2f} ms (torch.randn for the same normals: {randn * 1e3:.2f} ms) of the DP epoch's "
                f"{t.median(private) * 1e3:.2f} ms; the DP epoch's extra time over non-private: {extra * 1e3:.2f} ms"
            )
    return section
