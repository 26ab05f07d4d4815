"""privacy-arena: a tournament harness for machine-learning privacy.

The public facade. Plugins import what they need from here (``from arena import Model, Defense, hookimpl``); every
other module is private, and a test holds the built-in plugins to that. Names load lazily on first use, so
``import arena`` stays cheap for the command line; the ``TYPE_CHECKING`` block tells editors and type checkers
what each name is.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from arena._version import __version__
from arena.contracts.engine import TrainingEngine as _TrainingEngine
from arena.contracts.engine import install_engine as _install_engine
from arena.session import Session as _Session
from arena.session import establish as _establish


def _engine() -> _TrainingEngine:
    """The arena's training engine, imported when a contract first needs it (never by ``import arena`` itself)."""
    from arena.engine.torch_engine import ENGINE

    return ENGINE


def _sandbox_catalog(entry_points: list[Any]) -> Any:
    """The attack sandbox's catalog of third-party entry points, imported when plugins are first loaded."""
    from arena.pipeline.sandbox.catalog import catalog

    return catalog(entry_points)


# Here, in the package's root, which runs before any arena module: no order of imports leaves the contracts
# without their engine, or the plugin loader without the attack sandbox (``arena.session``).
_install_engine(_engine)
_establish(_Session(catalog=_sandbox_catalog))

if TYPE_CHECKING:
    # Plugin contracts: what a plugin subclasses or returns
    from arena.contracts.architecture import Architecture, ModelStack
    from arena.contracts.attack import Attack, Capability
    from arena.contracts.dataset import PAD, Dataset, DatasetLoader, TextDataset
    from arena.contracts.defense import RECIPE_FIELDS, Claim, Defense, Fit, FitTask
    from arena.contracts.game import Game, Outcome
    from arena.contracts.metric import Metric
    from arena.contracts.model import Model, ModelParams
    from arena.contracts.params import NoParams, PluginParams
    from arena.contracts.release import BlackBox, LabelOnly, Models, Release
    from arena.contracts.spec import GameSpec, Track
    from arena.contracts.view import Grant, ThreatModelError, View
    from arena.hookspecs import hookimpl
    from arena.pipeline.procedure import TrainingProcedure
    from arena.results.audit import GameAudit

    # isort: split
    # The built-in games, their views and guesses
    from arena.games.audit import AuditGame, AuditView, CanaryGuess
    from arena.games.gradients import GradientsGame, GradientsGuess, GradientsView, UpdateDefense
    from arena.games.language import LanguageGame, LanguageView
    from arena.games.language.query import TextBlackBox, lm_log_proba, lm_loss
    from arena.games.membership import MembershipGame, MembershipGuess, MembershipView
    from arena.games.membership.spec import TrainedElsewhere
    from arena.games.reconstruction import ReconstructionGame, ReconstructionGuess, ReconstructionView

    # isort: split
    # The Python API
    from arena.api import MergedResults, Results, evaluate, load, run
    from arena.games.membership.evaluate import Evaluation, EvaluationInputError
    from arena.games.membership.outputs import OutputsEvaluation, evaluate_outputs
    from arena.pipeline.user_fit import user_defense

    # isort: split
    # Helpers plugins need: training, privacy accounting, data, shadow pools, canaries
    from arena.contracts.dataset import available_memory, minmax_scale
    from arena.contracts.dense import Dense, Layers, to_state
    from arena.contracts.recipe import DPNoise, Recipe
    from arena.engine.batching import steps_and_rate
    from arena.engine.laplace import l1_from_l2, laplace, laplace_scale
    from arena.engine.lm import LoRA, example_nll, token_logprobs, train_lm
    from arena.engine.multiplicity import train_augmult
    from arena.engine.newton import design, fit_logreg
    from arena.engine.newton import gradient as logreg_gradient
    from arena.engine.output_perturbation import clip_rows, fit_penalised, l2_sensitivity
    from arena.engine.rng import Purpose as RandomPurpose
    from arena.engine.rng import stream as random_stream
    from arena.engine.seeds import derive_seed
    from arena.engine.trainer import train
    from arena.games.audit.canaries import gradient_canary_scores, input_canary_scores
    from arena.games.membership.formulas import (
        MIN_STD,
        Gaussians,
        fit_a,
        fit_gaussians,
        likelihood_ratio,
        log_mean_prob,
        log_odds,
        loss_log_odds,
        offline_log_prob,
        one_sided_out,
        population_references,
        rmia_counts,
        rmia_ratios,
        rmia_scores,
        true_class_log_odds,
        true_class_log_prob,
    )
    from arena.games.membership.pools import PoolData, ShadowPool, train_pool
    from arena.privacy.accounting import accountant_label, calibrate_noise
    from arena.privacy.accounting import epsilon as dpsgd_epsilon

_EXPORTS: dict[str, tuple[str, str]] = {
    # Plugin contracts: what a plugin subclasses or returns
    "hookimpl": ("arena.hookspecs", "hookimpl"),
    "PluginParams": ("arena.contracts.params", "PluginParams"),
    "NoParams": ("arena.contracts.params", "NoParams"),
    "Dataset": ("arena.contracts.dataset", "Dataset"),
    "DatasetLoader": ("arena.contracts.dataset", "DatasetLoader"),
    "TextDataset": ("arena.contracts.dataset", "TextDataset"),
    "PAD": ("arena.contracts.dataset", "PAD"),
    "Model": ("arena.contracts.model", "Model"),
    "Architecture": ("arena.contracts.architecture", "Architecture"),
    "ModelStack": ("arena.contracts.architecture", "ModelStack"),
    "ModelParams": ("arena.contracts.model", "ModelParams"),
    "Defense": ("arena.contracts.defense", "Defense"),
    "FitTask": ("arena.contracts.defense", "FitTask"),
    "Fit": ("arena.contracts.defense", "Fit"),
    "Claim": ("arena.contracts.defense", "Claim"),
    "RECIPE_FIELDS": ("arena.contracts.defense", "RECIPE_FIELDS"),
    "Attack": ("arena.contracts.attack", "Attack"),
    "Capability": ("arena.contracts.attack", "Capability"),
    "Game": ("arena.contracts.game", "Game"),
    "Outcome": ("arena.contracts.game", "Outcome"),
    "GameSpec": ("arena.contracts.spec", "GameSpec"),
    "Track": ("arena.contracts.spec", "Track"),
    "View": ("arena.contracts.view", "View"),
    "Grant": ("arena.contracts.view", "Grant"),
    "ThreatModelError": ("arena.contracts.view", "ThreatModelError"),
    "Release": ("arena.contracts.release", "Release"),
    "Models": ("arena.contracts.release", "Models"),
    "BlackBox": ("arena.contracts.release", "BlackBox"),
    "LabelOnly": ("arena.contracts.release", "LabelOnly"),
    "Metric": ("arena.contracts.metric", "Metric"),
    "TrainingProcedure": ("arena.pipeline.procedure", "TrainingProcedure"),
    "GameAudit": ("arena.results.audit", "GameAudit"),
    # The built-in games, their views and guesses
    "MembershipGame": ("arena.games.membership", "MembershipGame"),
    "LanguageGame": ("arena.games.language", "LanguageGame"),
    "LanguageView": ("arena.games.language", "LanguageView"),
    "TextBlackBox": ("arena.games.language.query", "TextBlackBox"),
    "lm_log_proba": ("arena.games.language.query", "lm_log_proba"),
    "lm_loss": ("arena.games.language.query", "lm_loss"),
    "MembershipView": ("arena.games.membership", "MembershipView"),
    "MembershipGuess": ("arena.games.membership", "MembershipGuess"),
    "TrainedElsewhere": ("arena.games.membership.spec", "TrainedElsewhere"),
    "ReconstructionGame": ("arena.games.reconstruction", "ReconstructionGame"),
    "ReconstructionView": ("arena.games.reconstruction", "ReconstructionView"),
    "ReconstructionGuess": ("arena.games.reconstruction", "ReconstructionGuess"),
    "AuditGame": ("arena.games.audit", "AuditGame"),
    "AuditView": ("arena.games.audit", "AuditView"),
    "CanaryGuess": ("arena.games.audit", "CanaryGuess"),
    "GradientsGame": ("arena.games.gradients", "GradientsGame"),
    "GradientsView": ("arena.games.gradients", "GradientsView"),
    "GradientsGuess": ("arena.games.gradients", "GradientsGuess"),
    "UpdateDefense": ("arena.games.gradients", "UpdateDefense"),
    # The Python API
    "run": ("arena.api", "run"),
    "load": ("arena.api", "load"),
    "Results": ("arena.api", "Results"),
    "MergedResults": ("arena.api", "MergedResults"),
    "evaluate": ("arena.api", "evaluate"),
    "user_defense": ("arena.pipeline.user_fit", "user_defense"),
    "Evaluation": ("arena.games.membership.evaluate", "Evaluation"),
    "EvaluationInputError": ("arena.games.membership.evaluate", "EvaluationInputError"),
    "evaluate_outputs": ("arena.games.membership.outputs", "evaluate_outputs"),
    "OutputsEvaluation": ("arena.games.membership.outputs", "OutputsEvaluation"),
    # Helpers plugins need: training, privacy accounting, data, shadow pools, canaries
    "train": ("arena.engine.trainer", "train"),
    "train_augmult": ("arena.engine.multiplicity", "train_augmult"),
    "train_lm": ("arena.engine.lm", "train_lm"),
    "LoRA": ("arena.engine.lm", "LoRA"),
    "example_nll": ("arena.engine.lm", "example_nll"),
    "token_logprobs": ("arena.engine.lm", "token_logprobs"),
    "Recipe": ("arena.contracts.recipe", "Recipe"),
    "DPNoise": ("arena.contracts.recipe", "DPNoise"),
    "steps_and_rate": ("arena.engine.batching", "steps_and_rate"),
    "Dense": ("arena.contracts.dense", "Dense"),
    "Layers": ("arena.contracts.dense", "Layers"),
    "to_state": ("arena.contracts.dense", "to_state"),
    "fit_logreg": ("arena.engine.newton", "fit_logreg"),
    "design": ("arena.engine.newton", "design"),
    "logreg_gradient": ("arena.engine.newton", "gradient"),
    "clip_rows": ("arena.engine.output_perturbation", "clip_rows"),
    "fit_penalised": ("arena.engine.output_perturbation", "fit_penalised"),
    "l2_sensitivity": ("arena.engine.output_perturbation", "l2_sensitivity"),
    "laplace": ("arena.engine.laplace", "laplace"),
    "laplace_scale": ("arena.engine.laplace", "laplace_scale"),
    "l1_from_l2": ("arena.engine.laplace", "l1_from_l2"),
    "random_stream": ("arena.engine.rng", "stream"),
    "RandomPurpose": ("arena.engine.rng", "Purpose"),
    "calibrate_noise": ("arena.privacy.accounting", "calibrate_noise"),
    "dpsgd_epsilon": ("arena.privacy.accounting", "epsilon"),
    "accountant_label": ("arena.privacy.accounting", "accountant_label"),
    "derive_seed": ("arena.engine.seeds", "derive_seed"),
    "minmax_scale": ("arena.contracts.dataset", "minmax_scale"),
    "available_memory": ("arena.contracts.dataset", "available_memory"),
    "train_pool": ("arena.games.membership.pools", "train_pool"),
    "ShadowPool": ("arena.games.membership.pools", "ShadowPool"),
    "PoolData": ("arena.games.membership.pools", "PoolData"),
    # The formulas of the output-based membership attacks (LiRA, RMIA), shared with ``arena evaluate-outputs``
    "MIN_STD": ("arena.games.membership.formulas", "MIN_STD"),
    "Gaussians": ("arena.games.membership.formulas", "Gaussians"),
    "fit_gaussians": ("arena.games.membership.formulas", "fit_gaussians"),
    "likelihood_ratio": ("arena.games.membership.formulas", "likelihood_ratio"),
    "log_odds": ("arena.games.membership.formulas", "log_odds"),
    "loss_log_odds": ("arena.games.membership.formulas", "loss_log_odds"),
    "one_sided_out": ("arena.games.membership.formulas", "one_sided_out"),
    "population_references": ("arena.games.membership.formulas", "population_references"),
    "true_class_log_odds": ("arena.games.membership.formulas", "true_class_log_odds"),
    "fit_a": ("arena.games.membership.formulas", "fit_a"),
    "log_mean_prob": ("arena.games.membership.formulas", "log_mean_prob"),
    "offline_log_prob": ("arena.games.membership.formulas", "offline_log_prob"),
    "rmia_counts": ("arena.games.membership.formulas", "rmia_counts"),
    "rmia_ratios": ("arena.games.membership.formulas", "rmia_ratios"),
    "rmia_scores": ("arena.games.membership.formulas", "rmia_scores"),
    "true_class_log_prob": ("arena.games.membership.formulas", "true_class_log_prob"),
    "gradient_canary_scores": ("arena.games.audit.canaries", "gradient_canary_scores"),
    "input_canary_scores": ("arena.games.audit.canaries", "input_canary_scores"),
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        module, attr = _EXPORTS[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'arena' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
