"""k. The prepared GPU check: both engines (batched and loop) on the digits CNN pool and on
scenarios/cifar10-wrn.yaml shrunk (synthetic 3×32×32 records written as CIFAR-10 python batches, a few hundred
records, a target and 4 shadows, WRN-10-1), each trained on the CPU and on CUDA and compared to tolerance; seconds
per model on the GPU; the full scenario's time extrapolated from WRN-16-4 steps.

``make gpu-check`` runs it alone (``python -m benchmarks --only k``, < 3 min on one GPU) and keeps every other
section of benchmarks/results.md. Without CUDA it compares the CPU with itself and times the CPU, saying so.
"""

from __future__ import annotations

import pickle
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml

from arena.engine import rng
from arena.engine.architecture import Architecture
from arena.engine.augment import Augment
from arena.engine.recipe import DPNoise, Recipe
from arena.engine.trainer import train
from arena_plugins.datasets import CIFAR10, LocalParams
from arena_plugins.models import WRN
from benchmarks.bench_dpsgd import CNN
from benchmarks.data import random_subsets
from benchmarks.processes import ROOT
from benchmarks.timing import Check, Section

SCENARIO = ROOT / "scenarios" / "cifar10-wrn.yaml"
TOLERANCE = 1e-3
"""Largest |Δ parameter| / largest |parameter| between the devices after training (float32, TF32 off)."""
NOISE = DPNoise(clip=1.0, noise_multiplier=1.0)
CLIPPING_ONLY = DPNoise(clip=1.0, noise_multiplier=0.0)
"""The loop engine's DP-SGD across devices: Opacus draws its noise from the device's own generator (seeded alike,
but CUDA's stream is not the CPU's), so the devices are compared on its Poisson samples and clipping (σ = 0)."""
ENGINES = {"batched engine": "auto", "loop engine": "loop"}
"""Each engine as a track selects it (``engine: auto`` takes the batched engine for these models)."""
MISSED = (
    "The devices disagree beyond float32 rounding: look at the figures below. Poisson masks or noise that differ "
    "exactly point at the counter RNG on this device (integer ops must agree bit for bit); equal draws but "
    "diverging parameters at a kernel whose result differs beyond rounding."
)


@dataclass(frozen=True)
class Sizes:
    records: int
    shadows: int
    epochs: int
    batch: int
    timing: int
    """Records per model in the WRN-16-4 timing steps (the extrapolation's basis)."""
    cnn_models: int
    cnn_records: int
    """The digits CNN pool: models, and records each model trains on (its own random subset), for ``epochs``."""


FULL = Sizes(records=400, shadows=4, epochs=2, batch=50, timing=512, cnn_models=16, cnn_records=500)
QUICK = Sizes(records=20, shadows=1, epochs=1, batch=5, timing=0, cnn_models=2, cnn_records=40)


def write_synthetic_cifar(folder: Path, n: int, seed: int = 0) -> None:
    """``n`` synthetic records in CIFAR-10's python format: data_batch_1..5 and a test_batch of n/5, uint8
    [m, 3072] (channel-major 32×32) with a class-dependent mean so that training has something to learn."""
    g = np.random.default_rng(seed)
    sizes = [n // 5 + (i < n % 5) for i in range(5)] + [max(1, n // 5)]
    names = [f"data_batch_{i + 1}" for i in range(5)] + ["test_batch"]
    folder.mkdir(parents=True, exist_ok=True)
    for name, m in zip(names, sizes):
        labels = g.integers(0, 10, m)
        data = np.clip(g.normal(60 + 14 * labels[:, None], 40, (m, 3072)), 0, 255).astype(np.uint8)
        with open(folder / name, "wb") as f:
            pickle.dump({b"data": data, b"labels": labels.tolist()}, f)


def _wrn(depth: int, width: int, groups: int) -> Architecture:
    return Architecture(WRN(WRN.Params(depth=depth, width=width, groups=groups)), (3, 32, 32), 10)


def _recipe(epochs: int, batch: int) -> Recipe:
    return Recipe(epochs=epochs, lr=0.1, momentum=0.9, batch_size=batch, augment=Augment(crop=4, flip=True))


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _halves(X: torch.Tensor, y: torch.Tensor, K: int) -> tuple[torch.Tensor, torch.Tensor]:
    """K training sets [K, n/2, d], [K, n/2]: model k on its own random half of the records (seeded)."""
    g = torch.Generator().manual_seed(7)
    rows = torch.stack([torch.randperm(len(y), generator=g)[: len(y) // 2] for _ in range(K)])
    return X[rows], y[rows]


def _train(arch, X, y, recipe, device: str, dp: DPNoise | None, engine: str = "auto") -> tuple[dict, float]:
    """Models on X [K, n, d], y [K, n] trained on ``device`` by ``engine``: the state on the CPU and the wall
    seconds."""
    seeds = torch.arange(X.shape[0], dtype=torch.int64)
    Xd, yd = X.to(device), y.to(device)
    _sync(device)
    start = time.perf_counter()
    state = train(arch, Xd, yd, recipe, seeds.to(device), (seeds + 1000).to(device), dp=dp, engine=engine)
    _sync(device)
    return {k: v.cpu() for k, v in state.items()}, time.perf_counter() - start


def _relative(a: dict, b: dict) -> float:
    scale = max(float(v.abs().max()) for v in a.values())
    return max(float((a[k] - b[k]).abs().max()) for k in a) / max(scale, 1e-30)


def _compare(section: Section, label: str, case: tuple, device: str, repeats: int) -> None:
    """One case (architecture, X, y, recipe, DP, engine) on the CPU and on ``device``: their parameters to
    ``TOLERANCE``, and the median seconds per model of ``repeats`` timed calls on ``device``."""
    arch, X, y, recipe, dp, engine = case
    on_cpu, _ = _train(arch, X, y, recipe, "cpu", dp, engine)
    on_device, _ = _train(arch, X, y, recipe, device, dp, engine)
    section.checks.append(Check(f"{label}: largest Δ parameter / largest parameter, CPU vs {device}",
                                _relative(on_cpu, on_device), TOLERANCE, "<=", "", why_missed=MISSED))
    times = [_train(arch, X, y, recipe, device, dp, engine)[1] for _ in range(repeats)]
    section.figures[f"{label}: seconds per model on {device} ({X.shape[0]} models of {X.shape[1]} records, "
                    f"{recipe.epochs} epochs, median of {repeats})"] = f"{float(np.median(times)) / X.shape[0]:.3f}"


def _draws_agree(device: str) -> str:
    """The counter RNG on ``device`` against the CPU: Poisson masks exactly, normals to float32 rounding."""
    seeds = torch.arange(5, dtype=torch.int64)
    masks = [rng.bernoulli(seeds.to(d), [1, 2], 4096, 0.1).cpu() for d in ("cpu", device)]
    counts = [rng.sampled_rows(seeds.to(d), [1, 2], 4096, 0.1)[1].cpu() for d in ("cpu", device)]
    normals = [rng.normal(seeds.to(d), [3, 4], 20_001).cpu() for d in ("cpu", device)]
    same = torch.equal(*masks) and torch.equal(*counts)
    return (f"Poisson masks equal: {'yes' if same else 'NO'}; max |Δ normal|: "
            f"{float((normals[0] - normals[1]).abs().max()):.1e}")


def _scenario_hours(device: str, sizes: Sizes) -> tuple[str, float]:
    """Seconds per image-epoch per model of the scenario's own model (WRN-16-4, ``pool_chunk`` models per call,
    its batch sizes capped by ``sizes.timing``), non-private and DP-SGD, on ``device``; and the scenario's hours:
    each release trains a target and one shared pool of shadows (the largest ``shadows`` of its attacks), every
    model on ``members`` records for the recipe's epochs."""
    spec = yaml.safe_load(SCENARIO.read_text())["tracks"][0]
    m = spec["model"]
    arch = _wrn(m["depth"], m["width"], m["groups"])
    K, members = spec["pool_chunk"], spec["game"]["members"]
    models = 1 + max(a.get("shadows", 0) for a in spec["attacks"])
    g = torch.Generator().manual_seed(1)
    X = torch.rand(K, sizes.timing, 3 * 32 * 32, generator=g)
    y = torch.randint(0, 10, (K, sizes.timing), generator=g)
    total, parts = 0.0, []
    for defense in spec["defenses"]:
        training = {**spec["training"], **defense.get("training", {})}
        dp = NOISE if defense["name"] == "dpsgd" else None
        batch = min(training["batch_size"], sizes.timing // 2)
        _train(arch, X[:, :16], y[:, :16], _recipe(1, 8), device, dp)  # warm-up: kernel selection, allocator
        _, seconds = _train(arch, X, y, _recipe(1, batch), device, dp)
        per_image_epoch = seconds / (K * sizes.timing)
        releases = len(defense.get("epsilons", [None]))
        total += releases * models * members * training["epochs"] * per_image_epoch
        parts.append(f"{defense['name']} {per_image_epoch * 1e3:.3f} ms (batch {batch})")
    return "; ".join(parts), total / 3600


def run(quick: bool, repeats: int) -> Section:
    sizes = QUICK if quick else FULL
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    name = torch.cuda.get_device_name(0) if cuda else "none (CUDA not available: the CPU compared with itself)"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    section = Section(
        "k",
        "GPU check: both engines on the digits CNN pool and the CIFAR-10 scenario shrunk, CPU vs CUDA",
        f"Each engine (the batched engine, as `engine: auto` takes it, and the loop engine, `engine: loop`: one "
        "plain-PyTorch model after another, DP-SGD through Opacus) on two pools, non-private and under DP-SGD "
        f"(clip 1, σ 1): (1) {sizes.cnn_models} models of the digits `cnn` plugin (1×8×8), each on its own random "
        f"subset of {sizes.cnn_records} records, {sizes.epochs} epochs, batch 64, lr 0.1, momentum 0.9; (2) "
        f"{SCENARIO.relative_to(ROOT)} shrunk: {sizes.records} synthetic 3×32×32 records written as CIFAR-10 python "
        "batches and read by the `cifar10` dataset plugin; WRN-10-1 (GroupNorm, weight standardisation), a target "
        f"and {sizes.shadows} shadows in one `train` call, each on its own half of the records, {sizes.epochs} "
        f"epochs, batch {sizes.batch}, crop 4 + flip augmentation, lr 0.1, momentum 0.9. The same call on the CPU "
        "and on CUDA (float32, TF32 off), parameters compared (the loop engine's DP-SGD at σ = 0: Opacus draws "
        "its noise from the device's own generator, whose CUDA stream is not the CPU's); then the call timed on "
        "the device (wall clock, synchronised), per model. The extrapolation times the scenario's own WRN-16-4 on "
        "the GPU for one epoch of synthetic records at its pool chunk and batch sizes (capped at half the timed "
        "records) and scales to every model, record and epoch of the scenario. "
        f"Device: **{name}**.",
    )
    with tempfile.TemporaryDirectory(prefix="arena-gpu-check-") as tmp:
        write_synthetic_cifar(Path(tmp), sizes.records)
        data = CIFAR10().load(LocalParams(path=Path(tmp)))
    X, y = torch.from_numpy(data.X).reshape(len(data.y), -1), torch.from_numpy(data.y)
    arch, recipe = _wrn(10, 1, 4), _recipe(sizes.epochs, sizes.batch)
    Xk, yk = _halves(X, y, 1 + sizes.shadows)
    Xc, yc = random_subsets("digits", sizes.cnn_records, sizes.cnn_models)
    cnn_recipe = Recipe(epochs=sizes.epochs, lr=0.1, momentum=0.9, batch_size=64)
    cases = (("digits CNN pool", CNN, Xc, yc, cnn_recipe), ("WRN-10-1", arch, Xk, yk, recipe))
    for case, model, Xm, ym, rec in cases:
        for engine, selected in ENGINES.items():
            for label, dp in (("non-private", None), ("DP-SGD", NOISE)):
                if selected == "loop" and dp is not None:
                    dp, label = CLIPPING_ONLY, "DP-SGD, σ = 0"
                _compare(section, f"{case}, {engine}, {label}", (model, Xm, ym, rec, dp, selected), device, repeats)
    section.figures[f"counter RNG, CPU vs {device}"] = _draws_agree(device)
    if sizes.timing and not cuda:
        section.figures[f"{SCENARIO.relative_to(ROOT)} extrapolated"] = (
            "not timed: WRN-16-4 steps at the scenario's pool chunk take far too long on a CPU")
    elif sizes.timing:
        per_image, hours = _scenario_hours(device, sizes)
        section.figures[f"WRN-16-4 on {device}, seconds per image-epoch per model"] = per_image
        section.figures[f"{SCENARIO.relative_to(ROOT)} extrapolated, one seed, on {device}"] = (
            f"{hours:.1f} hours (every release's target and shadow pool, each model on `members` records for its "
            "recipe's epochs; the attacks' scoring not included)")
    return section
