"""g. The arena's engines side by side: the torch.func path vs the hand path on the same MLP (why `engine="auto"`
picks the hand path for dense models), and the loop engine (one model at a time, DP-SGD through Opacus) beside the
batched engine, with its compiled kernels and without, and beside Opacus run by hand, on the digits CNN and MLP
(why `engine: auto` takes the batched engine wherever it is equivalent, and what the optional kernels buy)."""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Iterator

import opacus
import torch

from arena.engine import kernels, native
from arena.engine.trainer import train
from benchmarks.bench_dpsgd import CNN, FULL, MLP, NOISE, QUICK, recipe
from benchmarks.data import random_subsets
from benchmarks.peers import opacus_trainer
from benchmarks.timing import CPU, Section, Table, compare, ratio

TARGET = 1.0
MISSED = (
    "The hand path would be slower than torch.func here, so `choose_engine` should prefer torch.func for dense "
    "models at this size."
)
LOOP_TARGET = 1.0
"""The loop engine per model / the batched engine per model, K models, at least this: else `auto` should not
prefer the batched engine."""
LOOP_MISSED = (
    "At this K the loop engine, one plain-PyTorch model after another, trains a model faster than the batched "
    "engine trains each of K together: `engine: auto` should then prefer the loop engine for this model."
)
KERNEL_TARGET = 1.0
"""Under DP-SGD, where the kernels do most of their work: the batched engine with its compiled kernels off / on,
at least this (the kernels must not slow it down)."""
KERNEL_MISSED = (
    "The compiled kernels made the batched engine slower here: their callers should fall back to the eager passes "
    "for this model and K."
)
LOOP_MODELS = {"full": 16, "quick": 2}
"""K: models per call of the loop-engine comparison."""


def _kernel_libraries() -> None:
    """Forget each kernel module's loaded library, so the next call reads ``ARENA_KERNELS`` again."""
    for module in kernels.KERNELS.values():
        importlib.import_module(module).library.cache_clear()


@contextlib.contextmanager
def kernels_off() -> Iterator[None]:
    """Within: the batched engine in pure PyTorch (``ARENA_KERNELS=off``); after: the switch as it was."""
    before = os.environ.get(native.SWITCH)
    os.environ[native.SWITCH] = "off"
    _kernel_libraries()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(native.SWITCH, None)
        else:
            os.environ[native.SWITCH] = before
        _kernel_libraries()


def _pure(fn):
    def run(r: int):
        with kernels_off():
            return fn(r)

    return run


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a if a[k].is_floating_point())


def _hand_vs_func(sizes, repeats: int, section: Section) -> None:
    K = sizes.models[-1]
    per_call = sizes.epochs(K)
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
        section.tables.append(Table(f"MLP {label}, K={K}; CPU seconds per epoch per model", t, "s/epoch/model"))
        section.checks.append(ratio(f"MLP {label}: torch.func / hand path, K={K}", t, func, dense, TARGET,
                                    why_missed=MISSED))
        section.figures[f"MLP {label}: max |Δ parameter|, torch.func vs hand path"] = (
            f"{_max_diff(t.results[func][-1], t.results[dense][-1]):.1e}")


def _loop_vs_batched(name: str, arch, K: int, n: int, repeats: int, section: Section) -> None:
    """K models of ``arch``, one epoch each per call: the batched engine (kernels on, off), the loop engine and,
    under DP-SGD, Opacus's hooks run by hand (``peers.opacus_trainer``, set up outside the timing)."""
    X, y = random_subsets("digits", n, K)
    seeds = torch.arange(K, dtype=torch.int64)
    one = recipe(1)
    for dp, label in ((None, "non-private"), (NOISE, "DP-SGD")):
        batched, pure, loop = (f"batched engine, {label}", f"batched engine, kernels off, {label}",
                               f"loop engine, {label}")
        contenders = {
            batched: lambda r, dp=dp: train(arch, X, y, one, seeds, seeds, dp=dp),
            pure: _pure(lambda r, dp=dp: train(arch, X, y, one, seeds, seeds, dp=dp)),
            loop: lambda r, dp=dp: train(arch, X, y, one, seeds, seeds, dp=dp, engine="loop"),
        }
        scale = {batched: 1 / K, pure: 1 / K, loop: 1 / K}
        if dp is not None:
            hooks = [opacus_trainer(arch, X[k], y[k], one, NOISE, "hooks", k) for k in range(K)]
            by_hand = "Opacus hooks by hand, one model after another"
            contenders[by_hand] = lambda r, hooks=hooks: [f(1) for f in hooks]
            scale[by_hand] = 1 / K
        t = compare(contenders, repeats, scale=scale, clock=CPU)
        section.tables.append(Table(f"{name} {label}, K={K}; CPU seconds per model-epoch", t, "s/model-epoch"))
        section.checks.append(ratio(f"{name} {label}: loop engine / batched engine, K={K}", t, loop, batched,
                                    LOOP_TARGET, why_missed=LOOP_MISSED))
        if dp is not None:  # non-private, the kernels take only a grey first layer at K = 1 and the shuffles
            section.checks.append(ratio(f"{name} {label}: batched engine, kernels off / on, K={K}", t, pure,
                                        batched, KERNEL_TARGET, why_missed=KERNEL_MISSED))
        section.figures[f"{name} {label}: max |Δ parameter|, batched engine with vs without kernels"] = (
            f"{_max_diff(t.results[batched][-1], t.results[pure][-1]):.1e}")
        if dp is None:
            section.figures[f"{name} {label}: max |Δ parameter|, loop vs batched engine"] = (
                f"{_max_diff(t.results[batched][-1], t.results[loop][-1]):.1e}")


def run(quick: bool, repeats: int) -> Section:
    sizes = QUICK if quick else FULL
    K = sizes.models[-1]
    L = LOOP_MODELS["quick" if quick else "full"]
    built = all(importlib.import_module(m).library() is not None for m in kernels.KERNELS.values())
    section = Section(
        "g",
        "Engines: torch.func vs hand path (MLP); loop engine vs batched engine vs Opacus (CNN, MLP)",
        f"(1) The same {K} MLPs 64→256→10 relu on digits (n = {sizes.n}, batch 64, lr 0.1, momentum 0.9, "
        f"{sizes.epochs(K)} epoch(s)) trained by `train(..., engine=\"functional\")` (torch.func: `vmap` over "
        "models of `grad`, and for DP-SGD `vmap(grad)` over examples, materialised per-example gradients) and by "
        "`engine=\"dense\"` (hand-written batched backprop, ghost norms for DP-SGD); same seeds, same draws, so "
        "the models agree to float tolerance (figure below). CPU time per epoch per model. "
        f"(2) {L} models of the digits `cnn` plugin (1×8×8) and of the MLP, each on its own random subset of "
        f"n = {sizes.n}, one epoch a call (batch 64; DP-SGD: Poisson rate 64/n, clip 1, σ 1): the batched "
        "engine (`engine: auto`, all models in one call), the same with the compiled kernels off "
        f"(`ARENA_KERNELS=off`; kernels {'built' if built else 'NOT built on this machine: both rows are eager'}), "
        "the loop engine (`engine: loop`: one plain-PyTorch model after another; DP-SGD through Opacus "
        f"{opacus.__version__} `make_private` with ghost clipping, its set-up inside the call as a user meets it) "
        "and, under DP-SGD, Opacus's per-sample hooks run by hand on the same models (set up outside the "
        "timing). CPU seconds per model-epoch. Non-private, the loop and batched engines draw the same batches, "
        "so their models agree to float rounding; under DP-SGD the loop engine's noise comes from Opacus's "
        "generator (same distribution, other values).",
    )
    _hand_vs_func(sizes, repeats, section)
    for name, arch in (("cnn", CNN), ("mlp", MLP)):
        _loop_vs_batched(name, arch, L, sizes.n, repeats, section)
    return section
