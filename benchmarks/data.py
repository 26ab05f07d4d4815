"""The built-in datasets as the arena loads them, and seeded per-model training sets drawn from them."""

from __future__ import annotations

from functools import cache

import numpy as np
import torch

from arena.contracts.dataset import Dataset
from arena.contracts.params import NoParams
from arena.engine.architecture import Architecture
from arena.engine.dense import Layers, to_layers
from arena.engine.ensemble import init_state
from arena.engine.seeds import derive_seed
from arena_plugins.datasets import BreastCancer, Digits
from arena_plugins.models import CNN, MLP, LogReg

MODELS = {"logreg": LogReg, "mlp": MLP, "cnn": CNN}


@cache
def dataset(name: str) -> Dataset:
    """digits or breast_cancer, loaded by the arena's own plugin (features in [0, 1])."""
    loader = {"digits": Digits, "breast_cancer": BreastCancer}[name]()
    return loader.load(NoParams())


def fixed_plus_one(name: str, fixed: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """X [k, fixed+1, d], y [k, fixed+1]: model i trains on one shared D⁻ of ``fixed`` records plus target i.

    The training sets of the reconstruction game's released and shadow models. Targets are the records outside
    D⁻, distinct while there are enough of them, then cycled again (only memory benchmarks ask for that many).
    """
    data = dataset(name)
    order = np.random.default_rng(derive_seed("bench", name, seed)).permutation(data.n)
    targets = order[fixed + np.arange(k) % (data.n - fixed)]
    rows = np.concatenate([np.broadcast_to(order[:fixed], (k, fixed)), targets[:, None]], axis=1)
    return torch.from_numpy(data.X[rows]), torch.from_numpy(data.y[rows])


def random_subsets(name: str, size: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """X [k, size, d], y [k, size]: model i trains on its own random subset of ``size`` records."""
    data = dataset(name)
    g = np.random.default_rng(derive_seed("bench-subsets", name, seed))
    rows = np.stack([g.choice(data.n, size, replace=False) for _ in range(k)])
    return torch.from_numpy(data.X[rows]), torch.from_numpy(data.y[rows])


def architecture(name: str, *shape: int, **params: object) -> Architecture:
    """A built-in model plugin (mlp, cnn, ...) with ``params``, for records of ``shape[:-1]`` and ``shape[-1]``
    classes: ``architecture("mlp", 64, 10, hidden=[16])``, ``architecture("cnn", 1, 8, 8, 10)``.

    Built from the plugin class itself, not through the plugin registry, so the benchmarks do not depend on
    which other plugins this environment has installed."""
    cls = MODELS[name]
    return Architecture(cls(cls.Params(**params)), tuple(shape[:-1]), shape[-1])


def init_layers(arch: Architecture, seeds: torch.Tensor) -> Layers:
    """The engine's initialisation of K dense models, as dense layers [W1 [K,in,out], b1, ...]."""
    return to_layers(init_state(arch, seeds))
