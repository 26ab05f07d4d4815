"""f. Peak memory: the quickstart as `make run` runs it (Ray included), and a 5,000-model shadow pool.

The pool is trained in a fresh interpreter (``python -m benchmarks.bench_memory pool K EPOCHS``) so that its
peak resident set (getrusage's ru_maxrss) is the pool's alone, not this process's history.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.processes import ROOT, arena_command, run_command
from benchmarks.timing import Check, Section

GIB = 1024**3
POOL_TARGET_GIB = 2.0
POOL_MISSED = (
    "One call holds every model's training set ([K, 101, 64] float32) and each step's activations, logits and "
    "deltas for all K models at once. What would close it: train the pool in chunks of models (the counter "
    "RNG makes every model's result independent of its batch, so chunking changes no number)."
)


def train_pool(k: int, epochs: int) -> dict[str, float]:
    """Train the reconstruction game's shadow pool (digits MLP 64→16→10 tanh, |D⁻|=100 + one target each, full
    batch) for k models in ONE call of the engine; report peak RSS before and after, and the seconds taken."""
    import torch

    from arena.engine.recipe import Recipe
    from arena.engine.trainer import train
    from benchmarks.bench_batched import MLP
    from benchmarks.data import fixed_plus_one

    X, y = fixed_plus_one("digits", 100, k)
    seeds = torch.arange(k, dtype=torch.int64)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    params = train(MLP, X, y, Recipe(epochs=epochs, lr=0.5, momentum=0.9), seeds, seeds)
    seconds = time.perf_counter() - start
    if not all(torch.isfinite(p).all() for p in params.values()):
        raise RuntimeError("the shadow pool diverged")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"peak": peak, "before_training": before, "seconds": seconds}


def run(quick: bool, repeats: int) -> Section:
    k, epochs = (500, 5) if quick else (5000, 100)
    section = Section(
        "f",
        "Peak memory",
        "(1) `arena run scenarios/quickstart.yaml --out DIR` as `make run` runs it (Ray, one worker per core), "
        "fresh run directory: the process tree under the `arena` process (driver, Ray GCS server, raylet, "
        "workers) sampled from /proc every 0.1 s; reported are the peak of the summed PSS (shared pages split "
        "between the processes that map them: the tree's real footprint), the peak of the summed RSS (counts "
        "torch's shared libraries once per process, so it over-counts) and the largest single process. "
        "Sampling can miss a peak shorter than 0.1 s. "
        f"(2) A reconstruction shadow pool of {k:,} digits MLPs 64→16→10 tanh, each on |D⁻| = 100 + one target "
        f"(101 records, targets cycled past the 1,697 available), full batch, {epochs} epochs, trained at once by "
        f"ONE `arena.engine.trainer.train` call (K = {k:,}) in a fresh interpreter; peak = that process's "
        "ru_maxrss (imports and data included).",
    )
    with tempfile.TemporaryDirectory(prefix="arena-bench-") as tmp:
        from benchmarks.bench_tournament import scenario

        path = scenario(quick, Path(tmp))
        memory = run_command(arena_command("run", str(path), "--out", str(Path(tmp) / "run")), sample_memory=True)
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_memory", "pool", str(k), str(epochs)],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    pool = json.loads(out.stdout.strip().splitlines()[-1])
    section.figures.update({
        "quickstart: peak summed PSS of the process tree": f"{memory.pss_sum / GIB:.2f} GiB",
        "quickstart: peak summed RSS of the process tree": f"{memory.rss_sum / GIB:.2f} GiB",
        "quickstart: largest single process (RSS)": f"{memory.rss_largest / GIB:.2f} GiB",
        "quickstart: processes in the tree (max) / samples": f"{memory.processes} / {memory.samples}",
        f"shadow pool of {k:,}: peak RSS before training (interpreter, torch, data)":
            f"{pool['before_training'] / GIB:.2f} GiB",
        f"shadow pool of {k:,}: training time": f"{pool['seconds']:.1f} s",
    })
    section.checks.append(Check(f"shadow pool of {k:,} models, peak RSS", pool["peak"] / GIB, POOL_TARGET_GIB, "<=",
                                " GiB", why_missed=POOL_MISSED))
    return section


if __name__ == "__main__" and sys.argv[1:2] == ["pool"]:
    print(json.dumps(train_pool(int(sys.argv[2]), int(sys.argv[3]))))
