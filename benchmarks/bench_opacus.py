"""c. The arena's DP-SGD vs Opacus on the same CNN, data, batch size, clipping and noise."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import opacus
import torch
from opacus import PrivacyEngine
from torch.utils.data import DataLoader, TensorDataset

from arena.engine.ensemble import init_state
from arena.engine.trainer import train
from benchmarks.bench_dpsgd import CNN, FULL, NOISE, QUICK, recipe
from benchmarks.data import random_subsets
from benchmarks.timing import CPU, Section, Table, compare, ratio

TARGET_ONE, TARGET_MANY = 2.0, 4.0
MISSED = (
    "The arena clips by ghost norms (arena/engine/ghost.py: one forward of all K models, one backward to the "
    "layer outputs, per-layer norms, one weight backward of the clip-scaled output gradients), so its DP epoch "
    "costs 1.2× (K=1) to 1.5× (K=64) its own non-private epoch (pair b): the extra is the Poisson batch padded to "
    "the largest sampled count, the per-example norms and the counter RNG. Opacus's hooks form this small CNN's "
    "per-example gradients with one einsum per layer, which is cheap too, so the targets ask for a DP epoch at or "
    "below the arena's own non-private epoch (2× Opacus ≈ 0.047 s for one model, 4× ≈ 0.024 s per model at K=64, "
    "against non-private epochs of 0.046 s and 0.023 s in b). At K=64 the step is bound by memory traffic over "
    "the first convolution's activations ([B, K·16, 8, 8]: ReLU and max-pool forward and backward, the copy of "
    "its output gradient from channels-last into per-example layout for the per-example gradient). What would "
    "close it: fused kernels (torch.compile) for the ReLU/max-pool pair and the first layer's per-example "
    "gradient, and the same channels-last layer-by-layer execution for non-private training."
)


def opacus_trainer(X: torch.Tensor, y: torch.Tensor, mode: str) -> Callable[[int], None]:
    """A function running ``epochs`` epochs of Opacus DP-SGD on one CNN (built once, outside the timing).

    The cnn plugin's module with the arena's initialisation of model 0; ``make_private`` with Poisson sampling
    (its DPDataLoader draws each batch with rate 64/n, like the arena), flat clipping at 1, noise multiplier 1,
    SGD(lr 0.1, momentum 0.9); ``mode`` is Opacus's grad_sample_mode: "hooks" (per-sample gradients) or "ghost"
    (fast gradient clipping, two backward passes).
    """
    model = CNN.build()
    state = init_state(CNN, torch.zeros(1, dtype=torch.int64))
    model.load_state_dict({k: v[0] for k, v in state.items()})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = DataLoader(TensorDataset(X.reshape(-1, *CNN.input_shape), y), batch_size=64)
    criterion = torch.nn.CrossEntropyLoss()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        made = PrivacyEngine().make_private(
            module=model, optimizer=optimizer, data_loader=loader, criterion=criterion,
            noise_multiplier=NOISE.noise_multiplier, max_grad_norm=NOISE.clip, poisson_sampling=True,
            grad_sample_mode=mode,
        )
    if mode == "ghost":
        model, optimizer, criterion, loader = made
    else:
        model, optimizer, loader = made

    def epochs(n_epochs: int) -> None:
        warnings.filterwarnings("ignore", message="Full backward hook is firing")  # Opacus's hooks, harmless
        for _ in range(n_epochs):
            for xb, yb in loader:
                if len(xb) == 0:
                    continue
                optimizer.zero_grad()
                criterion(model(xb), yb).backward()
                optimizer.step()

    return epochs


def run(quick: bool, repeats: int) -> Section:
    sizes = QUICK if quick else FULL
    section = Section(
        "c",
        "Arena DP-SGD vs Opacus (CNN)",
        f"DP-SGD on the `cnn` plugin's module (1×8×8 digits, {CNN.template().n_params:,} parameters), n = "
        f"{sizes.n}, expected batch 64 (Poisson sampling, q = 64/n), clip 1, noise multiplier 1, SGD lr 0.1 "
        f"momentum 0.9; CPU time per epoch. Arena: `train(..., dp=DPNoise(1, 1))` "
        "(ghost clipping, arena/engine/ghost.py; counter-RNG "
        f"noise). Opacus {opacus.__version__}: `PrivacyEngine.make_private` (Poisson DPDataLoader) in its two "
        "modes, 'hooks' (per-sample gradients) and 'ghost' (fast gradient clipping); set-up (make_private) is "
        "outside the timing, the accountant's per-step bookkeeping inside it, as in a real run. Second table: "
        "the arena training K such models in one call against Opacus training one (per-model epoch time; Opacus "
        "has no model axis, so K models cost K times one).",
    )
    X, y = random_subsets("digits", sizes.n, 1)
    seeds = torch.zeros(1, dtype=torch.int64)
    hooks, ghost = opacus_trainer(X[0], y[0], "hooks"), opacus_trainer(X[0], y[0], "ghost")
    arena = "arena DP-SGD, K=1"

    def epochs(r: int) -> int:
        return 1 if r < 0 else sizes.epochs

    per_epoch = 1.0 / sizes.epochs
    t = compare(
        {
            arena: lambda r: train(CNN, X, y, recipe(epochs(r)), seeds, seeds, dp=NOISE),
            "Opacus hooks": lambda r: hooks(epochs(r)),
            "Opacus ghost": lambda r: ghost(epochs(r)),
        },
        repeats,
        scale=dict.fromkeys([arena, "Opacus hooks", "Opacus ghost"], per_epoch),
        clock=CPU,
    )
    section.tables.append(Table("one CNN; CPU seconds per epoch", t, "s/epoch"))
    fastest = min(("Opacus hooks", "Opacus ghost"), key=t.median)
    section.checks += [
        ratio("Opacus hooks / arena, one CNN", t, "Opacus hooks", arena, TARGET_ONE, why_missed=MISSED),
        ratio("Opacus ghost / arena, one CNN", t, "Opacus ghost", arena, TARGET_ONE, why_missed=MISSED),
    ]
    K = sizes.models[-1]
    Xk, yk = random_subsets("digits", sizes.n, K)
    seeds_k = torch.arange(K, dtype=torch.int64)
    batched = f"arena DP-SGD, K={K} in one call"
    opacus_one = hooks if fastest == "Opacus hooks" else ghost
    tk = compare(
        {
            batched: lambda r: train(CNN, Xk, yk, recipe(epochs(r)), seeds_k, seeds_k, dp=NOISE),
            fastest: lambda r: opacus_one(epochs(r)),
        },
        repeats,
        scale={batched: per_epoch / K, fastest: per_epoch},
        clock=CPU,
    )
    section.tables.append(Table(f"arena with {K} CNNs per call vs Opacus's faster mode; CPU seconds per epoch per "
                                "model", tk, "s/epoch/model"))
    section.checks.append(ratio(f"{fastest} / arena K={K}, per CNN", tk, fastest, batched, TARGET_MANY,
                                why_missed=MISSED))
    return section
