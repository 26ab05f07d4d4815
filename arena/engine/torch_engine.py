"""The arena's training engine behind the contracts' protocol (``arena.contracts.engine.TrainingEngine``): the
batched engine (``torch.func``, K models at once) where it trains the module as written, the loop engine (plain
PyTorch, Opacus for DP-SGD) elsewhere, as ``arena.engine.trainer.train`` chooses."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from arena.contracts.architecture import Architecture, Batch, State, Template
from arena.contracts.recipe import DPNoise, Recipe
from arena.engine import architecture, dense, ensemble, groupnorm, rng, trainer
from arena.engine.batching import augmented, batches, poisson_batches


class TorchEngine:
    """``TrainingEngine`` on PyTorch, on the device of the tensors it is given."""

    def train(self, arch: Architecture, X: torch.Tensor, y: torch.Tensor, recipe: Recipe, init_seeds: torch.Tensor,
              train_seeds: torch.Tensor, dp: DPNoise | None = None) -> State:
        return trainer.train(arch, X, y, recipe, init_seeds, train_seeds, dp)

    def template(self, arch: Architecture) -> Template:
        return architecture.template(arch)

    def group_norm(self, module: torch.nn.Module) -> torch.nn.Module:
        return groupnorm.replace_batch_norm(module)

    def logits(self, arch: Architecture, state: State, X: torch.Tensor) -> torch.Tensor:
        spec = arch.dense
        if spec is not None:  # the hand path: the same function, faster than vmap for small dense nets
            return dense.forward(spec, dense.to_layers(state), X)
        return ensemble.logits(arch, state, X)

    def ensemble(self, arch: Architecture, init_seeds: torch.Tensor, train_seeds: torch.Tensor, dtype: torch.dtype,
                 device: torch.device) -> ensemble.Ensemble:
        return ensemble.Ensemble(arch, ensemble.init_state(arch, init_seeds, dtype, device), train_seeds)

    def minibatches(self, arch: Architecture, recipe: Recipe, X: torch.Tensor, y: torch.Tensor,
                    train_seeds: torch.Tensor, poisson: bool = False) -> Iterator[Batch]:
        seeds = rng.Keys(train_seeds)
        source = (poisson_batches if poisson else batches)(X, y, recipe, seeds)
        yield from augmented(source, arch, recipe.augment, seeds)


ENGINE = TorchEngine()
"""The engine ``import arena`` installs (``arena.contracts.engine.install_engine``)."""
