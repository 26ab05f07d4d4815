"""The audit game: is a DP training procedure as private as it claims? (Nasr et al. 2023; Steinke, Nasr &
Jagielski 2023.)

Per seed the challenger draws ``members`` records (every model's training set) and ``test`` records (utility),
and trains ``models`` = K released models of the defense under test in ONE batched call of its own ``fit``
through ``arena.games.audit.canaries.train_with_canaries``, with canaries inserted: ``canaries`` white-box gradient
canaries per model (Dirac gradients of norm C added to DP-SGD's clipped sum; ``kind`` gradient or both) and
``input_canaries`` black-box input canaries per model (mislabelled or out-of-distribution records; ``kind`` input
or both; on a text dataset ``input_kind: sequence``, random token strings, the only canaries a language model
takes), each included in its model independently with probability ½. Those bits are the secret. The canaried
models never enter the procedure's ordinary model cache (they are cached under their own key).

The attack is an auditor (the built-in ``canary-auditor``): its view holds the released parameters and the
published initialisation (capability ``parameters``), one black-box query interface per model (``query``) and
the canaries' design (coordinates and signs, input records), never the bits; it returns one score per canary
(``CanaryGuess``, higher: included). The game computes, per canary kind, the assumption-free one-run and f-DP
one-run bounds (at α/#tests: Bonferroni), the model-based Gaussian or σ fit of the gradient canaries (assumes the
release is the recorded DP-SGD), the held-out Clopper–Pearson bound and the Gaussian-DP estimate (at α), and
recomputes the claim from the mechanism the engine really ran (``arena.games.audit.canaries``). Metrics:
``empirical_epsilon`` (the assumption-free headline), ``model_based_epsilon``, ``eps_one_run`` and per kind
``<kind>_eps_one_run``, ``_eps_fdp``, ``_eps_heldout``, ``_eps_gdp`` (threshold), ``_eps_gdp_fit`` (Gaussian fit),
``_max_certifiable``, ``_canaries``; ``claimed_epsilon``, ``mechanism_epsilon``, ``claim_check``, ``models``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import torch
from pydantic import ConfigDict, Field, NonNegativeInt, PositiveInt

from arena.contracts.attack import Attack
from arena.contracts.dataset import Dataset, TextDataset
from arena.contracts.defense import Claim
from arena.contracts.game import Game, Outcome
from arena.contracts.metric import NON_NEGATIVE, Metric
from arena.contracts.release import BlackBox, Models, Release
from arena.contracts.spec import GameSpec
from arena.contracts.view import Grant, View
from arena.engine.seeds import derive_seed, permutation
from arena.games.audit.canaries import (
    CanaryAudit,
    CanaryRun,
    CanarySpec,
    GradientCanaries,
    analyse,
    run_truths,
    train_with_canaries,
)
from arena.games.audit.claim_check import ClaimCheck
from arena.games.language.query import TextBlackBox, next_token_accuracy
from arena.pipeline.procedure import TrainingProcedure
from arena.pipeline.store import content_key, tensor_digest

KINDS = ("gradient", "input")
ESTIMATORS = ("eps_one_run", "eps_fdp", "eps_heldout", "eps_gdp", "eps_gdp_fit", "eps_sigma_fit", "eps_fdp_gdp")


class AuditGameSpec(GameSpec):
    """K released models with canaries; which canaries, how many, and the auditor's confidence."""

    model_config = ConfigDict(extra="forbid")
    name: Literal["audit"]
    members: PositiveInt = Field(default=500, description="records every released model trains on")
    test: PositiveInt = Field(default=200, description="records the utility is measured on")
    models: PositiveInt = Field(default=64, le=4096, description="K released models, trained in one call")
    kind: Literal["gradient", "input", "both"] = "gradient"
    canaries: NonNegativeInt = Field(default=256, le=1_000_000, description="white-box gradient canaries per model")
    input_canaries: NonNegativeInt = Field(default=64, le=100_000, description="black-box input canaries per model")
    input_kind: Literal["mislabelled", "ood", "sequence"] = Field(
        default="mislabelled", description="mislabelled or ood (images, tables); sequence: random token strings "
        "(text datasets and language models, the only kind they play)")
    init: Literal["known", "unknown"] = Field(
        default="known", description="known: the challenger publishes each model's initialisation to the auditor")
    coordinates: Literal["quiet", "random"] = "quiet"
    alpha: float = Field(default=0.05, gt=0.0, lt=1.0, description="1 − confidence of every bound")

    def required_points(self) -> int:
        return self.members + self.test

    def canary_spec(self, seed: int) -> CanarySpec:
        return CanarySpec(
            models=self.models,
            gradient=self.canaries if self.kind in ("gradient", "both") else 0,
            inputs=self.input_canaries if self.kind in ("input", "both") else 0,
            input_kind=self.input_kind, init=self.init, coordinates=self.coordinates, alpha=self.alpha, seed=seed,
        )


@dataclass(frozen=True)
class CanaryGuess:
    """The auditor's scores: canary kind (``AuditView.kinds``) → [K, m] array, higher meaning included."""

    scores: dict[str, np.ndarray]


class AuditView(View):
    """What an auditor is given: the canaries' design, never which were included."""

    n_models: int
    kinds: tuple[str, ...]
    """``"gradient"`` and/or ``"input"``"""
    n_classes: int
    seed: int
    gradient_index: torch.Tensor | None
    """[K, m] the flat parameter coordinate of each gradient canary"""
    gradient_sign: torch.Tensor | None
    """[K, m] ±1: canary (k, j) is sign·C·e_index when included"""
    canary_X: torch.Tensor | None
    """[m, d] the input canaries (the same records offered to every model)"""
    canary_y: torch.Tensor | None
    """[m]"""
    parameters: Annotated[Models, Grant("parameters")]
    """the K released models"""
    init: Annotated[Models | None, Grant("parameters")]
    """their initialisation, when the challenger publishes it (init: known)"""
    models: Annotated[list[BlackBox], Grant("query")]
    """one black box per released model (``TextBlackBox`` for language models: ``loss`` is the mean next-token NLL
    of each token record)"""
    init_models: Annotated[list[BlackBox] | None, Grant("parameters")]
    """one black box per published initialisation (init: known), of the same kind as ``models``: what a canary's
    loss was before training"""


METRICS = (
    Metric("empirical_epsilon", "audit", True, "empirical ε (95 %), assumption-free: the largest of the one-run and "
           "f-DP one-run lower bounds of every canary kind, Bonferroni over them (valid for any mechanism)",
           NON_NEGATIVE),
    Metric("model_based_epsilon", "audit", True, "model-based ε lower bound: the gradient canaries' Gaussian fit "
           "(full batch) or σ fit (subsampled); assumes the release is the recorded DP-SGD, so neither the headline "
           "nor part of the verdict", NON_NEGATIVE),
    Metric("eps_one_run", "audit", True, "one-run ε lower bound (Steinke et al. 2023, assumption-free), the "
           "largest over the canary kinds", NON_NEGATIVE),
    *(Metric(f"{k}_{e}", "audit", True, f"{k} canaries: {what}", NON_NEGATIVE)
      for k in KINDS for e, what in (
          ("eps_one_run", "one-run ε lower bound (assumption-free)"),
          ("eps_fdp", "f-DP one-run ε lower bound (Mahloujifar et al. 2025; the (ε, δ) curve rejected, "
                      "assumption-free)"),
          ("eps_heldout", "held-out Clopper–Pearson ε bound (canaries as independent trials)"),
          ("eps_gdp", "Gaussian-DP ε estimate, held-out threshold (Nasr et al. 2023)"),
          ("eps_gdp_fit", "Gaussian-fit ε bound (Nasr et al. 2023), model-based: assumes the release is the "
                          "recorded full-batch DP-SGD; an estimate otherwise"),
          ("eps_sigma_fit", "σ-fit ε bound (Cohen's d bounds the noise of Poisson-subsampled DP-SGD from above), "
                            "model-based: assumes the release is the recorded DP-SGD"),
          ("eps_fdp_gdp", "f-DP one-run ε estimate (Mahloujifar et al. 2025) if the trade-off is Gaussian"),
      )),
)


def audit_metrics(result: CanaryAudit, input_kind: str) -> dict[str, Any]:
    """The row's metrics: every estimator of every kind (None where the kind was not played), the claim, counts."""
    out: dict[str, Any] = {f"{k}_{e}": None for k in KINDS for e in ESTIMATORS}
    out |= {
        "empirical_epsilon": result.lower_bound, "eps_one_run": max(k.one_run.epsilon for k in result.kinds),
        "model_based_epsilon": result.model_based_epsilon,
        "gaussian_in_verdict": False,  # the model-based fit is never part of the verdict (model_based_epsilon)
        "claimed_epsilon": result.claim.epsilon, "delta": result.claim.delta,
        "mechanism_epsilon": (None if result.mechanism_epsilon is None or not np.isfinite(result.mechanism_epsilon)
                              else result.mechanism_epsilon),
        "mechanism_noise_free": result.mechanism_epsilon is not None and not np.isfinite(result.mechanism_epsilon),
        "claimed_epsilon_pld": result.claim_pld_epsilon,
        "release_is_trained": result.check is None or result.check.trained_release,
        "mechanism_runs": None if result.check is None else result.check.runs,
        "mechanism_laplace": None if result.check is None else result.check.laplace,
        "mechanism_unaccounted": None if result.check is None else result.check.unaccounted,
        "mechanism_composition": None if result.check is None else result.check.composition,
        "mechanism_sequential_epsilon": (None if result.check is None or result.check.sequential_epsilon is None
                                         or not np.isfinite(result.check.sequential_epsilon)
                                         else result.check.sequential_epsilon),
        "claim_consistent": result.claim_consistent, "claim_check": result.claim_check,
        "flagged": result.flagged, "violation": result.violation,
        "curve_refuted": result.curve_refuted,
        "models": result.models, "alpha": result.alpha, "input_kind": input_kind,
    }
    for k in result.kinds:
        p = "gradient" if k.kind == "gradient" else "input"
        out |= {
            f"{p}_eps_one_run": k.one_run.epsilon, f"{p}_one_run_alpha": k.alpha_bound,
            f"{p}_max_certifiable": k.one_run.max_certifiable, f"{p}_one_run_guesses": k.one_run.guesses,
            f"{p}_one_run_correct": k.one_run.correct,
            f"{p}_eps_heldout": k.heldout.epsilon, f"{p}_heldout_max_certifiable": k.heldout.max_certifiable,
            f"{p}_eps_gdp": k.gdp.epsilon, f"{p}_gdp_mu_lo": k.gdp.mu_lo,
            f"{p}_eps_gdp_fit": k.fit.epsilon if k.fit else None, f"{p}_gdp_fit_mu": k.fit.mu_hat if k.fit else None,
            f"{p}_gdp_fit_mu_lo": k.fit.mu_lo if k.fit else None, f"{p}_gdp_fit_se": k.fit.se if k.fit else None,
            f"{p}_canaries": k.n_canaries, f"{p}_included": k.included,
            f"{p}_eps_sigma_fit": k.sigma.epsilon if k.sigma else None,
            f"{p}_sigma_fit_sigma_hi": k.sigma.sigma_hi if k.sigma else None,
            f"{p}_sigma_fit_d": k.sigma.d_hat if k.sigma else None,
            f"{p}_sigma_fit_se": k.sigma.se if k.sigma else None,
            f"{p}_eps_fdp_gdp": k.fdp.gdp_epsilon if k.fdp else None,
            f"{p}_eps_fdp": k.fdp.epsilon if k.fdp else None,
            f"{p}_fdp_claim_refuted": k.fdp.claim_refuted if k.fdp else None,
            f"{p}_one_run_m": k.one_run.m,
        }
    return out


def _kind_name(kind: str) -> str:
    return "gradient" if kind == "gradient" else "input"


def run_to_tensors(run: CanaryRun) -> dict[str, torch.Tensor]:
    """A canaried run as named tensors (its cache entry)."""
    out = {f"state.{k}": v for k, v in run.state.items()} | {f"init.{k}": v for k, v in run.init.items()}
    if run.gradient is not None:
        out |= {"g.index": run.gradient.index, "g.sign": run.gradient.sign, "g.included": run.gradient.included}
    if run.inputs_X is not None:
        assert run.inputs_y is not None  # set together with inputs_X
        out |= {"in.X": run.inputs_X, "in.y": run.inputs_y, "in.included": torch.as_tensor(run.inputs_in)}
    meta = {"claim": run.claim.as_dict(), "check": run.check.as_dict(), "input_kind": run.input_kind}
    out["meta"] = torch.frombuffer(bytearray(json.dumps(meta).encode()), dtype=torch.uint8)
    return {k: v.detach().cpu().contiguous() for k, v in out.items()}


def run_from_tensors(t: dict[str, torch.Tensor]) -> CanaryRun:
    meta = json.loads(bytes(t["meta"].tolist()).decode())
    # an entry cached before the check recorded more than the ε: its release is not known to be the trained state
    check = ClaimCheck(**meta["check"]) if "check" in meta else ClaimCheck(meta["mechanism_epsilon"], 0, 0, 0, False)
    grad = GradientCanaries(t["g.index"], t["g.sign"], t["g.included"]) if "g.index" in t else None
    return CanaryRun(
        state={k[6:]: v for k, v in t.items() if k.startswith("state.")},
        init={k[5:]: v for k, v in t.items() if k.startswith("init.")},
        gradient=grad, inputs_X=t.get("in.X"), inputs_y=t.get("in.y"),
        inputs_in=t["in.included"].numpy().astype(bool) if "in.included" in t else None,
        claim=Claim(**meta["claim"]), check=check, input_kind=meta["input_kind"],
    )


class AuditGame(Game):
    """K canaried models of the defense per seed; the auditor scores the canaries, the game bounds ε."""

    name = "audit"
    Spec = AuditGameSpec
    View = AuditView
    Guess = CanaryGuess
    metrics = METRICS
    template_dir = Path(__file__).parent / "templates"
    audit_rule = "arena.games.audit.rule:audit_game"
    audit_view = "arena.games.audit.sections:audit_section"
    report_view = "arena.games.audit.sections:section"
    primary_metric = "empirical_epsilon"
    spec: AuditGameSpec

    def __init__(self, spec: AuditGameSpec, dataset: Dataset, seed: int) -> None:
        super().__init__(spec, dataset, seed)
        order = permutation(dataset.n, "audit-split", seed)
        self.members = order[: spec.members]
        self.test = order[spec.members : spec.members + spec.test]
        self.canary_spec = spec.canary_spec(derive_seed(seed, "audit-canaries"))
        self.run: CanaryRun | None = None

    @classmethod
    def problems(  # type: ignore[override]  # narrowed to the game's Spec
        cls, spec: AuditGameSpec, dataset: Dataset
    ) -> list[tuple[str, str]]:
        out = super().problems(spec, dataset)
        if spec.kind in ("gradient", "both") and spec.canaries == 0:
            out.append(("canaries", f"kind {spec.kind!r} needs gradient canaries (canaries >= 1)"))
        if spec.kind in ("input", "both") and spec.input_canaries == 0:
            out.append(("input_canaries", f"kind {spec.kind!r} needs input canaries (input_canaries >= 1)"))
        if spec.kind in ("input", "both") and spec.input_kind == "mislabelled" and spec.input_canaries > spec.members:
            out.append(("input_canaries", f"{spec.input_canaries} mislabelled canaries need as many members"))
        text = isinstance(dataset, TextDataset)
        if text and (spec.kind != "input" or spec.input_kind != "sequence"):
            out.append(("kind", "a language model is audited with token-sequence input canaries (kind: input, "
                                "input_kind: sequence); white-box gradient canaries, mislabelled and ood records are "
                                "the image and table tracks'"))
        elif not text and spec.input_kind == "sequence" and spec.kind != "gradient":
            out.append(("input_kind", f"sequence canaries are token records of a text dataset; {dataset.name!r} is "
                                      f"{dataset.kind}"))
        return out

    @classmethod
    def train_size(cls, spec: AuditGameSpec) -> int:  # type: ignore[override]  # narrowed to the game's Spec
        return spec.members

    def release(self, procedure: TrainingProcedure) -> Release:  # type: ignore[override]  # narrowed to TrainingProcedure
        """The K canaried models (from the run directory's cache when an earlier call trained them)."""
        X, y = self.records(self.members)
        key = content_key({**procedure.identity(), "canaries": self.canary_spec.__dict__,
                           "data": tensor_digest(X, y)})
        cache = procedure.cache
        if cache is None:
            self.run = self._train(procedure, X, y)
        else:
            with cache.lock("audits", key):
                hit = cache.get("audits", key)
                if hit is not None:
                    self.run = run_from_tensors(hit)
                else:
                    self.run = self._train(procedure, X, y)
                    cache.put("audits", key, run_to_tensors(self.run))
        order = [*procedure.arch.template().trainable, *procedure.arch.template().buffers]
        self.run = replace(self.run, state={k: self.run.state[k] for k in order},
                           init={k: self.run.init[k] for k in order if k in self.run.init})
        models = Models(procedure.arch, self.run.state)
        Xt, yt = self.records(self.test)
        if isinstance(self.dataset, TextDataset):  # next-token accuracy on held-out text, the language track's
            utility = float(np.mean([next_token_accuracy(models, Xt, k)[0] for k in range(models.k)]))
        else:
            utility = float(models.accuracy(Xt, yt).mean())
        return Release(models=models, utility=utility, claim=self.run.claim)

    def _train(self, procedure: TrainingProcedure, X: torch.Tensor, y: torch.Tensor) -> CanaryRun:
        from arena.pipeline.procedure import resolve_device

        device = resolve_device(procedure.device)
        run = train_with_canaries(procedure.defense, procedure.arch, procedure.recipe, X.to(device),
                                  y.to(device), self.canary_spec, procedure.solver)
        procedure.stats.trained += self.canary_spec.models
        return run_from_tensors(run_to_tensors(run))  # on the CPU, exactly as a cache hit returns it

    def _kinds(self) -> tuple[str, ...]:
        return tuple(k for k, on in (("gradient", self.canary_spec.gradient), ("input", self.canary_spec.inputs)) if on)

    def view(  # type: ignore[override]  # narrowed to TrainingProcedure
        self, attack: Attack, release: Release, procedure: TrainingProcedure
    ) -> AuditView:
        """The canaries' design, the released parameters with their published initialisation, a black box per
        model; never the inclusion bits."""
        run = self._require_run()
        g = run.gradient
        models = release.models
        init = Models(procedure.arch, run.init) if self.spec.init == "known" else None
        box = TextBlackBox if isinstance(self.dataset, TextDataset) else BlackBox
        return AuditView(attack.name, attack.threat_model, {
            "n_models": models.k, "kinds": self._kinds(), "n_classes": self.dataset.n_classes,
            "seed": derive_seed(self.seed, "attack", attack.name),
            "gradient_index": None if g is None else g.index.clone(),
            "gradient_sign": None if g is None else g.sign.clone(),
            "canary_X": None if run.inputs_X is None else run.inputs_X.clone(),
            "canary_y": None if run.inputs_y is None else run.inputs_y.clone(),
            "parameters": models,
            "init": init,
            "models": [box(models.select(k)) for k in range(models.k)],
            "init_models": None if init is None else [box(init.select(k)) for k in range(init.k)],
        })

    def _require_run(self) -> CanaryRun:
        if self.run is None:
            raise RuntimeError("the audit game's release has not been trained yet")
        return self.run

    def score(self, attack: Attack, guess: Any) -> Outcome:
        """The statistics of the auditor's scores against the secret bits, and the claim check."""
        if not isinstance(guess, CanaryGuess):
            raise TypeError(f"attack {attack.name!r} returned {type(guess).__name__}, not a CanaryGuess")
        run = self._require_run()
        truths = {_kind_name(k): v for k, v in run_truths(run).items()}
        if sorted(guess.scores) != sorted(truths):
            raise ValueError(f"attack {attack.name!r} scored canary kinds {sorted(guess.scores)}, "
                             f"the game played {sorted(truths)}")
        scores = {}
        for k, t in truths.items():
            s = np.asarray(guess.scores[k], dtype=np.float64)
            if s.shape != t.shape:
                raise ValueError(f"attack {attack.name!r} returned {k} scores of shape {s.shape}, need {t.shape}")
            scores[k] = s
        result = analyse(run.claim, scores, truths, run.models, self.spec.alpha,
                         derive_seed(self.seed, "audit-statistics"), run.check)
        metrics = audit_metrics(result, self.spec.input_kind)
        notes = [
            f"empirical_epsilon is the largest of the verdict's assumption-free bounds (confidence "
            f"{1 - self.spec.alpha:.0%} jointly, Bonferroni): the one-run bound (Steinke et al. 2023) and the f-DP "
            "one-run bound (Mahloujifar et al. 2025) of each kind, valid for any mechanism"
            + ("; model_based_epsilon, the gradient canaries' "
               + ("σ fit" if result.claim.sample_rate is not None and result.claim.sample_rate < 1 else "Gaussian fit")
               + ", is model-based: it assumes the release is the recorded DP-SGD, so it is neither the headline "
               "nor part of the verdict" if result.gaussian else "")
            + "; eps_heldout treats canaries as independent trials; eps_gdp (one threshold), eps_fdp_gdp"
            + ("" if result.gaussian else " and eps_gdp_fit") + " assume a Gaussian trade-off: estimates",
        ]
        if any(k.fdp is not None and k.fdp.claim_refuted is not None for k in result.kinds):
            notes.append("the f-DP one-run test (Mahloujifar et al. 2025) checks the scores against the claim's own "
                         "trade-off curve (its σ, q and steps); a rejection is a violation (curve_refuted)")
        if not run.check.trained_release:
            notes.append("the release is not the state the defense's train call returned (post-processed), so the "
                         "model-based fits' hypothesis fails: they are estimates here")
        if not run.check.decided:
            notes.append("claim check: cannot decide how the defense's train calls compose (they trained on record "
                         "sets that are not one data-independent partition's cells, or on rows that are not the "
                         "audit's records); no violation is declared from it, the canaries' tests speak alone")
        elif run.check.composition == "parallel":
            notes.append(f"claim check: the train calls trained on cells of a data-independent {run.check.cells}-cell "
                         "partition (verified from the records), composed in parallel")
        if run.check.unaccounted:
            notes.append(f"{run.check.unaccounted} Laplace draw(s) declared no sensitivity and are left out of the "
                         "claim check: mechanism_epsilon is a lower bound on the release's ε")
        arrays = {}
        for k in truths:
            arrays[f"{k}_scores"] = scores[k]
            arrays[f"{k}_truth"] = truths[k].astype(np.int8)
        return Outcome(metrics, notes, arrays)
