"""privacy-arena: a tournament harness for machine-learning privacy.

The public facade: plugins import what they need from here (``from arena import Model, Defense, hookimpl``);
every other module is private. Names load lazily, so ``import arena`` stays cheap for the command line.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "hookimpl": "arena.hookspecs",
    "PluginParams": "arena.params",
    "Game": "arena.games.base",
    "Outcome": "arena.games.base",
    "GameSpec": "arena.scenario",
    "View": "arena.games.view",
    "MembershipView": "arena.games.membership",
    "ReconstructionView": "arena.games.reconstruction",
    "AuditView": "arena.games.audit",
    "CanaryGuess": "arena.games.audit",
    "gradient_canary_scores": "arena.canaries",
    "input_canary_scores": "arena.canaries",
    "Release": "arena.release",
    "LabelOnly": "arena.release",
    "TrainingProcedure": "arena.procedure",
    "derive_seed": "arena.data",
    "minmax_scale": "arena.data",
    "available_memory": "arena.data",
    "Track": "arena.scenario",
    "train_pool": "arena.pools",
    "plan_pool": "arena.pools",
    "ShadowPool": "arena.pools",
    "PoolData": "arena.pools",
    "Model": "arena.model",
    "ModelParams": "arena.model",
    "Defense": "arena.defense",
    "FitTask": "arena.defense",
    "Fit": "arena.defense",
    "Claim": "arena.defense",
    "Attack": "arena.attack",
    "MembershipGuess": "arena.attack",
    "ReconstructionGuess": "arena.attack",
    "DatasetLoader": "arena.data",
    "Dataset": "arena.data",
    "NoParams": "arena.data",
    "Metric": "arena.metrics",
    "Models": "arena.release",
    "BlackBox": "arena.release",
    "ThreatModelError": "arena.games.view",
    "Dense": "arena.engine.dense",
    "Recipe": "arena.engine.trainer",
    "DPNoise": "arena.engine.trainer",
    "train": "arena.engine.trainer",
    "steps_and_rate": "arena.engine.trainer",
    "run": "arena.api",
    "load": "arena.api",
    "Results": "arena.api",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'arena' has no attribute {name!r}")
