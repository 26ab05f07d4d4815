"""What a user would otherwise run, one model after another: a plain ``nn.Module`` + ``torch.optim`` loop, and
Opacus's DP-SGD on the same module (built and made private once, outside the timing)."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch.utils.data import DataLoader, TensorDataset

from arena.engine.architecture import Architecture
from arena.engine.ensemble import init_state
from arena.engine.recipe import DPNoise, Recipe

Trainer = Callable[[int], None]
"""Runs the given number of epochs on one model (its state carries over between calls)."""


def _module(arch: Architecture, seed: int) -> torch.nn.Module:
    """The plugin's module with the arena's initialisation of the model with init seed ``seed``."""
    model = arch.build()
    state = init_state(arch, torch.tensor([seed], dtype=torch.int64))
    model.load_state_dict({k: v[0] for k, v in state.items()})
    return model


def torch_loop(arch: Architecture, X: torch.Tensor, y: torch.Tensor, recipe: Recipe, seed: int) -> Trainer:
    """A plain loop on one model's records X [n, d]: a fresh ``torch.randperm`` shuffle per epoch cut into
    batches, ``cross_entropy``, ``backward``, ``torch.optim.SGD`` with momentum (what the arena's non-private
    epoch does, with torch's own generator)."""
    model = _module(arch, seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=recipe.lr, momentum=recipe.momentum)
    images = X.reshape(-1, *arch.input_shape)
    generator = torch.Generator().manual_seed(seed)
    batch = recipe.batch_size or len(images)

    def epochs(n_epochs: int) -> None:
        for _ in range(n_epochs):
            perm = torch.randperm(len(images), generator=generator)
            for start in range(0, len(images), batch):
                idx = perm[start : start + batch]
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(images[idx]), y[idx]).backward()
                optimizer.step()

    return epochs


def opacus_trainer(
    arch: Architecture, X: torch.Tensor, y: torch.Tensor, recipe: Recipe, noise: DPNoise, mode: str, seed: int = 0
) -> Trainer:
    """Opacus DP-SGD on one model: ``make_private`` with Poisson sampling (its DPDataLoader draws each batch at
    rate B/n, like the arena), flat clipping, SGD with momentum; ``mode`` is Opacus's grad_sample_mode: "hooks"
    (per-sample gradients) or "ghost" (fast gradient clipping, two backward passes). The accountant's per-step
    bookkeeping runs inside the timed epochs, as in a real run."""
    from opacus import PrivacyEngine

    model = _module(arch, seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=recipe.lr, momentum=recipe.momentum)
    loader = DataLoader(TensorDataset(X.reshape(-1, *arch.input_shape), y), batch_size=recipe.batch_size)
    criterion = torch.nn.CrossEntropyLoss()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        made = PrivacyEngine().make_private(
            module=model, optimizer=optimizer, data_loader=loader, criterion=criterion,
            noise_multiplier=noise.noise_multiplier, max_grad_norm=noise.clip, poisson_sampling=True,
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
