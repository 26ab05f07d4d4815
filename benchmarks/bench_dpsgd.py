"""b. A DP-SGD epoch vs a non-private epoch of the same engine, and where the extra time of a DP step goes."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from arena.engine import rng
from arena.engine.trainer import DPNoise, Recipe, steps_and_rate, train
from benchmarks.data import architecture, random_subsets
from benchmarks.timing import Section, Table, compare, ratio

ARCH = architecture("mlp", 64, 10, hidden=[256], activation="relu")
NOISE = DPNoise(clip=1.0, noise_multiplier=1.0)
TARGET = 1.5
MISSED = (
    "Where the time goes: the counter RNG (figure above: one Poisson mask of n draws and one Gaussian per "
    "parameter every step, each value a two-round lowbias32 hash of (seed, stream, counter) computed by "
    "~25 eager torch operations, then Box–Muller) is most of the DP epoch's extra time; ghost-norm clipping, "
    "the padded Poisson batch and the noise addition are the rest. The RNG has to stay counter-based: it is "
    "what makes a model train identically alone or inside any batch. Done here, bit-identical to before: the "
    "hash runs on 32-bit words with wrapping int32 products (3–4× faster than the 16-bit-halves int64 "
    "emulation), and each seed's stream-independent key half is derived once per `train` call (`rng.Keys`) "
    "instead of at every draw; together a DP epoch at K=1 went from ~5.6× to ~3× a non-private one. What "
    "would close the rest: one fused kernel for hash + Box–Muller (torch.compile of `rng.normal` runs 6× "
    "faster in a microbenchmark, but compiles for ~25 s per process and is not bit-identical to eager), or a "
    "small C++/Triton counter-based generator."
)


@dataclass(frozen=True)
class Sizes:
    n: int
    epochs: int
    models: tuple[int, ...]


FULL = Sizes(n=1000, epochs=5, models=(1, 64))
QUICK = Sizes(n=200, epochs=1, models=(1, 4))


def recipe(epochs: int) -> Recipe:
    return Recipe(epochs=epochs, lr=0.1, momentum=0.9, batch_size=64)


def rng_seconds_per_epoch(n: int, K: int, draws: int = 20) -> float:
    """Seconds the counter RNG alone takes for one DP epoch of K models: a Poisson mask and a noise draw per step."""
    steps, q = steps_and_rate(n, recipe(1))
    seeds = rng.Keys(torch.arange(K, dtype=torch.int64))  # prepared once, as `train` does
    start = time.perf_counter()
    for t in range(draws):
        rng.bernoulli(seeds, rng.stream(rng.Purpose.POISSON, t), n, q)
        rng.normal(seeds, rng.stream(rng.Purpose.NOISE, t), ARCH.dense.n_params)
    return (time.perf_counter() - start) / draws * steps


def run(quick: bool, repeats: int) -> Section:
    sizes = QUICK if quick else FULL
    section = Section(
        "b",
        "DP-SGD epoch vs non-private epoch",
        f"The engine's `train` on digits, MLP 64→256→10 relu ({ARCH.dense.n_params:,} parameters), n = {sizes.n} "
        f"records per model, batch 64, lr 0.1, momentum 0.9, {sizes.epochs} epoch(s) per call; time per epoch "
        "per model. Non-private: a fresh shuffle per epoch cut into batches of 64. DP-SGD (dp=DPNoise(clip 1, "
        "σ 1)): Poisson sampling at q = 64/n, per-example clipping by ghost norms, Gaussian noise on the "
        "clipped sum, every random number from the counter RNG (so a model trains identically alone or in a "
        "batch). Same number of steps per epoch (⌈n/64⌉).",
    )
    for K in sizes.models:
        X, y = random_subsets("digits", sizes.n, K)
        seeds = torch.arange(K, dtype=torch.int64)
        nonprivate, private = f"non-private, K={K}", f"DP-SGD, K={K}"

        def epochs(r: int) -> int:
            return 1 if r < 0 else sizes.epochs

        per_model_epoch = 1.0 / (sizes.epochs * K)
        t = compare(
            {
                nonprivate: lambda r: train(ARCH, X, y, recipe(epochs(r)), seeds, seeds),
                private: lambda r: train(ARCH, X, y, recipe(epochs(r)), seeds, seeds, dp=NOISE),
            },
            repeats,
            scale={nonprivate: per_model_epoch, private: per_model_epoch},
        )
        section.tables.append(Table(f"{K} model(s) per call; seconds per epoch per model", t, "s/epoch/model"))
        check = ratio(f"DP-SGD / non-private epoch, K={K}", t, private, nonprivate, TARGET, op="<=",
                      why_missed=MISSED)
        section.checks.append(check)
        rng_share = rng_seconds_per_epoch(sizes.n, K) / K
        extra = t.median(private) - t.median(nonprivate)
        section.figures[f"K={K}: counter RNG alone (Poisson masks + noise), per epoch per model"] = (
            f"{rng_share * 1e3:.2f} ms of the DP epoch's {t.median(private) * 1e3:.2f} ms "
            f"(the DP epoch's extra time over non-private: {extra * 1e3:.2f} ms)"
        )
    return section
