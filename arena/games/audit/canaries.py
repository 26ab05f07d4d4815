"""Auditing a DP training procedure with canaries: K models in one batched ``train`` call, each canary included in
its model independently with probability ½, and lower bounds on ε from how well the released models give the
inclusions away. Game-agnostic: an ``audit`` game calls ``audit`` (or ``audit_procedure``) and reads ``metrics()``.

**White-box gradient canaries** (Nasr et al. 2023, "Tight Auditing of Differentially Private Machine Learning";
Steinke, Nasr & Jagielski 2023, "Privacy Auditing with One (1) Training Run"). Canary j of model k is a Dirac
gradient s·C·e_c (a single coordinate c of the flat parameter vector, sign s = ±1, norm exactly the clipping norm
C), which the engine adds to the clipped sum of every DP-SGD step that samples it (``arena.engine.trainer
.GradientCanaries``): a worst-case record under add/remove. The defense's own ``fit`` trains unchanged: the
canaries reach its ``train`` call through ``arena.engine.trainer.instrumented``, so a defense that mis-clips,
mis-scales its noise or mis-counts its steps is audited as it really trains. The auditor sees the released
parameters (and, with ``init="known"``, the initialisation the challenger publishes) and scores canary (k, j) by
−s·(θ_final − θ_init)[c]: an included canary pushes its coordinate by −lr·s·C/(qN) per sampled step.
Coordinates are chosen before training and independently of the secret bits: by default the ``quiet`` ones, whose
non-private gradient at the initialisation is smallest in magnitude (coordinates fed by always-zero features get
no data gradient at all, so their movement is the canary and the noise alone).

**Black-box input canaries** (Jagielski et al. 2020; Steinke et al. 2023): records appended to every model's
training set, present in model k independently with probability ½ (an absent row is never sampled; the public
expected batch size q·n counts every row, so inclusion is add/remove). ``mislabelled``: a copy of a training
record with a wrong label; ``ood``: a uniform-noise input with a random label. Scored by the final model alone:
−(cross-entropy loss on the canary). ``sequence`` (language models, trained by ``arena.engine.lm.train_lm``,
which honours the same presence mask): a random token string one record long, ids uniform over the vocabulary
but 0; scored by its loss reduction, the mean next-token NLL at the published initialisation minus after
training (−NLL when the initialisation is not published).

**Statistics** (``arena.privacy``), per canary kind, over all K·m canaries: canaries in different models are
independent runs and within a model the one-run analysis holds, so the whole experiment is one run of a mechanism
that is (ε, δ)-DP in each canary's bit, and the **one-run bound** of Steinke et al. is a proved lower bound for any
mechanism. For a **full-batch** claim (sample rate 1) the gradient canaries' scores are Gaussian with one variance
(the movement of the canary's coordinate is T Gaussian steps, shifted by the canary: exactly so where no data
gradient reaches the coordinate, and measured conservative where one does), so the
**Gaussian-fit bound** (the parametric form of Nasr et al. 2023's white-box audit) is a bound too, and a far more
powerful one: it uses every score, not counts at one threshold. The verdict's bounds are the one-run bound of each
kind and, for a full-batch claim whose release is the state ``train`` returned, the gradient kind's Gaussian-fit
bound, each at α/#bounds (Bonferroni); flagged
iff one exceeds the claimed add/remove ε, so under a true claim the flag fires with probability at most α
(simulated in ``tests/test_canaries.py``). Their largest is the **empirical ε** (confidence 1 − α). The **held-out
Clopper–Pearson bound** (canaries as independent trials) and the **Gaussian-DP estimate at one held-out
threshold** are reported beside them at α, with ``max_certifiable``; with Poisson subsampling the Gaussian fit is
an estimate only (the movement is then a Gaussian mixture). The Gaussian hypothesis is the engine's: its noise is
Gaussian and the release is the trained parameters; extra independent noise or a subsampled run only lowers μ̂,
but a defense that post-processed the parameters non-linearly would void it (clipped or squashed weights raise
Cohen's d above μ). So the engine records a digest of every state ``train`` returns, and the fit joins the verdict
only when the release is bit for bit one of them; otherwise it is an estimate and the one-run bounds speak alone
(``arena.games.audit.claim_check``, which also composes every mechanism the release ran for the claim check).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

from arena.contracts.defense import Claim, Defense, Fit, FitTask
from arena.contracts.release import Models
from arena.engine.architecture import Architecture, State
from arena.engine.digests import record_digests
from arena.engine.ensemble import init_state, logits
from arena.engine.functional import mean_gradient
from arena.engine.instruments import AuditInstruments, GradientCanaries, instrumented
from arena.engine.lm import models_nll
from arena.engine.recipe import Recipe
from arena.games.audit.claim_check import ClaimCheck, check_claim
from arena.games.audit.verdict import CanaryAudit, KindResult, analyse, flag_batch
from arena.privacy.binomial import ALPHA

__all__ = ["CanaryAudit", "CanaryRun", "CanarySpec", "ClaimCheck", "KindResult", "analyse", "audit", "flag_batch",
           "train_with_canaries"]  # the statistics live in arena.games.audit.verdict; re-exported for callers

InputKind = Literal["mislabelled", "ood", "sequence"]


@dataclass(frozen=True)
class CanarySpec:
    """How an audit is played: ``models`` released models trained at once, ``gradient`` white-box canaries and
    ``inputs`` black-box input canaries per model (0: none of that kind), each included w.p. ½."""

    models: int = 16
    gradient: int = 256
    inputs: int = 0
    input_kind: InputKind = "mislabelled"
    init: Literal["known", "unknown"] = "known"
    coordinates: Literal["quiet", "random"] = "quiet"
    shared_init: bool = False
    """Every model starts from one published initialisation, so the data gradients' drift on a coordinate is
    nearly the same in every model and centring removes it."""
    centre: bool = False
    """Score each gradient canary against the mean movement of its coordinate in the other K − 1 models."""
    alpha: float = ALPHA
    seed: int = 0

    def __post_init__(self) -> None:
        if self.models < 1 or self.gradient < 0 or self.inputs < 0 or self.gradient + self.inputs == 0:
            raise ValueError("need models >= 1 and some canaries (gradient or inputs)")
        if not 0 < self.alpha < 1:
            raise ValueError("need 0 < alpha < 1")


FitFn = Callable[[FitTask], Fit]


def _flat(arch: Architecture, state: State) -> torch.Tensor:
    """[K, P] each model's trainable parameters in module order (the canaries' coordinates)."""
    names = arch.template().trainable
    return torch.cat([state[k].reshape(state[k].shape[0], -1) for k in names], dim=1)


def _coordinates(arch: Architecture, init: State, X: torch.Tensor, y: torch.Tensor, spec: CanarySpec,
                 g: np.random.Generator) -> torch.Tensor:
    """[K, m] distinct coordinates per model, chosen before training and independently of the secret bits."""
    P = arch.template().n_params
    K, m = spec.models, spec.gradient
    if m > P:
        raise ValueError(f"{m} gradient canaries per model need as many coordinates; the model has {P}")
    if spec.coordinates == "random":
        return torch.as_tensor(np.stack([g.permutation(P)[:m] for _ in range(K)]))
    template = arch.template()
    params = {k: init[k] for k in template.trainable}
    buffers = {k: init[k] for k in template.buffers}
    images = X.reshape(K, X.shape[1], *arch.input_shape)
    grad = mean_gradient(arch, params, buffers, images, y)
    size = _flat(arch, grad).abs().mean(0) + torch.as_tensor(g.random(P) * 1e-12, dtype=X.dtype)  # random ties
    quiet = torch.argsort(size)[:m]
    return quiet.unsqueeze(0).expand(K, m).contiguous()


def _input_canaries(X: np.ndarray, y: np.ndarray, n_classes: int, spec: CanarySpec, g: np.random.Generator
                    ) -> tuple[np.ndarray, np.ndarray]:
    m = spec.inputs
    if spec.input_kind == "sequence":  # token records [n, L]: random ids, every position a token, no label
        return g.integers(1, n_classes, (m, X.shape[1])).astype(X.dtype), np.zeros(m, dtype=np.int64)
    if spec.input_kind == "mislabelled":
        if m > len(X):
            raise ValueError(f"{m} mislabelled canaries need as many records; the data has {len(X)}")
        idx = g.choice(len(X), m, replace=False)
        wrong = (y[idx] + g.integers(1, n_classes, m)) % n_classes
        return X[idx].copy(), wrong.astype(np.int64)
    lo, hi = float(X.min()), float(X.max())
    return g.uniform(lo, hi, (m, X.shape[1])).astype(X.dtype), g.integers(0, n_classes, m).astype(np.int64)


@dataclass(frozen=True)
class CanaryRun:
    """What training K models with canaries produced: their final and initial states, the canaries with their
    secret bits (``gradient.included``, ``inputs_in``), the input canary records, the claim, and the PLD ε of
    the mechanisms the engine saw the defense run and whether the release is the state ``train`` returned
    (``check``)."""

    state: State
    init: State
    gradient: GradientCanaries | None
    inputs_X: torch.Tensor | None  # [m, d] the input canaries (the same records for every model)
    inputs_y: torch.Tensor | None  # [m]
    inputs_in: np.ndarray | None  # [K, m] bool: canary j present in model k's data (secret)
    claim: Claim
    check: ClaimCheck
    input_kind: str = "mislabelled"

    @property
    def models(self) -> int:
        return next(iter(self.state.values())).shape[0]


def train_with_canaries(
    fit: FitFn | Defense,
    arch: Architecture,
    recipe: Recipe,
    X: torch.Tensor,
    y: torch.Tensor,
    spec: CanarySpec = CanarySpec(),
    solver: Literal["auto", "gradient", "newton"] = "auto",
) -> CanaryRun:
    """Train ``spec.models`` models of ``fit`` (a defense, or its ``fit`` method) at once on records X [n, d],
    labels y [n] with the canaries of ``spec`` inserted; seeds and secrets come from ``spec.seed``."""
    fit_fn = fit.fit if isinstance(fit, Defense) else fit
    K = spec.models
    g = np.random.default_rng([spec.seed, 0xCA7A])
    init_seeds = torch.as_tensor(g.integers(0, 2**62, K), dtype=torch.int64)
    if spec.shared_init:
        init_seeds = init_seeds[:1].expand(K).contiguous()
    train_seeds = torch.as_tensor(g.integers(0, 2**62, K), dtype=torch.int64)
    n0 = X.shape[0]
    Xk, yk, present = X, y, None
    in_truth, cx_t, cy_t = None, None, None
    if spec.inputs:
        cx, cy = _input_canaries(X.cpu().numpy(), y.cpu().numpy(), arch.n_classes, spec, g)
        cx_t, cy_t = torch.as_tensor(cx, dtype=X.dtype, device=X.device), torch.as_tensor(cy, device=y.device)
        Xk, yk = torch.cat([X, cx_t]), torch.cat([y, cy_t])
        in_truth = g.random((K, spec.inputs)) < 0.5
        present = torch.ones(K, n0 + spec.inputs, dtype=torch.bool, device=X.device)
        present[:, n0:] = torch.as_tensor(in_truth, device=X.device)
    Xs = Xk.unsqueeze(0).expand(K, *Xk.shape).contiguous()
    ys = yk.unsqueeze(0).expand(K, *yk.shape).contiguous()
    init = init_state(arch, init_seeds, X.dtype, X.device)
    canaries = None
    if spec.gradient:
        index = _coordinates(arch, init, Xs[:, :n0], ys[:, :n0], spec, g)
        sign = torch.as_tensor(np.where(g.random((K, spec.gradient)) < 0.5, -1.0, 1.0), dtype=X.dtype)
        grad_truth = g.random((K, spec.gradient)) < 0.5
        canaries = GradientCanaries(index, sign, torch.as_tensor(grad_truth))
    instruments = AuditInstruments(canaries, present, records=record_digests(Xk, yk))
    with instrumented(instruments):
        result = fit_fn(FitTask(arch, recipe, Xs, ys, init_seeds, train_seeds, solver))
    if instruments.calls == 0:
        raise ValueError("the defense did not train through the engine's DP-SGD, so its canaries were never inserted")
    if result.claim is None:
        raise ValueError("the defense makes no privacy claim: there is nothing to audit")
    return CanaryRun(result.state, init, canaries, cx_t, cy_t, in_truth, result.claim,
                     check_claim(instruments, result.claim.delta, result.state), spec.input_kind)


def gradient_canary_scores(final: torch.Tensor, start: torch.Tensor | None, index: torch.Tensor, sign: torch.Tensor,
                           centre: bool = True) -> np.ndarray:
    """[K, m] white-box scores of Dirac gradient canaries (higher: included) from the released parameters
    ``final`` [K, P] and, when the auditor knows it, the initialisation ``start`` [K, P]: −s·(θ_final − θ_init)[c],
    each coordinate's movement taken against its mean movement in the other models when ``centre``."""
    moved = torch.gather(final - (start if start is not None else torch.zeros_like(final)), 1,
                         index.to(final.device)).double().cpu().numpy()
    signs = sign.double().cpu().numpy()
    if centre and moved.shape[0] > 1:
        moved = moved - _others_mean(moved, index.cpu().numpy())
    return -signs * moved


def _others_mean(moved: np.ndarray, index: np.ndarray) -> np.ndarray:
    """[K, m] the mean movement of each canary's coordinate over the other models that carry a canary there."""
    P = int(index.max()) + 1
    total, count = np.zeros(P), np.zeros(P)
    np.add.at(total, index, moved)
    np.add.at(count, index, 1.0)
    others = count[index] - 1.0
    return np.where(others > 0, (total[index] - moved) / np.maximum(others, 1.0), 0.0)


def input_canary_scores(losses: torch.Tensor | np.ndarray, reference: torch.Tensor | np.ndarray | None = None,
                        centre: bool = False) -> np.ndarray:
    """[K, m] black-box scores of input canaries from each model's loss on each canary ``losses`` [K, m]:
    −loss, or the loss reduction ``reference`` − loss against each model's loss at its published initialisation
    ``reference`` [K, m] (what training on the canary changed, not how easy the canary was to begin with); with
    ``centre``, each score taken against the canary's mean score in the other K − 1 models (every model is offered
    the same canary records, included in each independently, so what is common to all is the canary's difficulty
    and what stands out is inclusion: a post-processing of all K releases, which the one-run analysis allows)."""
    score = -_numpy(losses)
    if reference is not None:
        score = score + _numpy(reference)
    if centre and score.shape[0] > 1:
        score = score - _others_mean(score, np.broadcast_to(np.arange(score.shape[1]), score.shape))
    return score


def _numpy(a: torch.Tensor | np.ndarray) -> np.ndarray:
    return np.asarray(a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else a, np.float64)


def run_scores(arch: Architecture, run: CanaryRun, spec: CanarySpec) -> dict[str, np.ndarray]:
    """The built-in auditor's scores of ``run``: kind → [K, m]."""
    out: dict[str, np.ndarray] = {}
    if run.gradient is not None:
        final = _flat(arch, run.state)
        start = _flat(arch, run.init) if spec.init == "known" else None
        out["gradient"] = gradient_canary_scores(final, start, run.gradient.index, run.gradient.sign, spec.centre)
    if run.inputs_X is not None:
        assert run.inputs_y is not None  # set together with inputs_X
        K = run.models
        if run.input_kind == "sequence":  # the loss reduction against the published initialisation
            start = _sequence_losses(arch, run.init, run.inputs_X) if spec.init == "known" else None
            out["input_sequence"] = input_canary_scores(_sequence_losses(arch, run.state, run.inputs_X), start)
        else:
            out[f"input_{run.input_kind}"] = input_canary_scores(_losses(arch, run.state, run.inputs_X, run.inputs_y,
                                                                         K))
    return out


def _sequence_losses(arch: Architecture, state: State, X: torch.Tensor) -> torch.Tensor:
    """[K, m] each language model's mean next-token NLL on each token record of X [m, L]."""
    models = Models(arch, state)
    return torch.stack([models_nll(models.module, k, X) for k in range(models.k)])


def _losses(arch: Architecture, state: State, X: torch.Tensor, y: torch.Tensor, K: int) -> torch.Tensor:
    out = logits(arch, state, X.unsqueeze(0).expand(K, *X.shape).contiguous())
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.to(out.device).repeat(K),
                           reduction="none").reshape(K, -1)


def run_truths(run: CanaryRun) -> dict[str, np.ndarray]:
    """The secret bits of ``run``: kind → [K, m] booleans (1: included)."""
    out: dict[str, np.ndarray] = {}
    if run.gradient is not None:
        out["gradient"] = run.gradient.included.cpu().numpy().astype(bool)
    if run.inputs_in is not None:
        out[f"input_{run.input_kind}"] = np.asarray(run.inputs_in, dtype=bool)
    return out


def audit(
    fit: FitFn | Defense,
    arch: Architecture,
    recipe: Recipe,
    X: torch.Tensor,
    y: torch.Tensor,
    spec: CanarySpec = CanarySpec(),
    solver: Literal["auto", "gradient", "newton"] = "auto",
) -> CanaryAudit:
    """Audit the DP claim of ``fit`` (a defense, or its ``fit`` method) on records X [n, d], labels y [n]: train
    ``spec.models`` models at once with canaries, score them with the built-in auditor, and bound ε (see the
    module docstring). Every model trains on all of X (plus its input canaries' rows)."""
    run = train_with_canaries(fit, arch, recipe, X, y, spec, solver)
    return analyse(run.claim, run_scores(arch, run, spec), run_truths(run), spec.models, spec.alpha, spec.seed,
                   run.check)


def audit_procedure(procedure, X: torch.Tensor, y: torch.Tensor, spec: CanarySpec = CanarySpec()) -> CanaryAudit:  # noqa: ANN001
    """``audit`` of a ``TrainingProcedure`` (its defense, architecture, recipe and solver); its model cache is
    bypassed, since canaried models must never be served as the procedure's ordinary ones."""
    return audit(procedure.defense, procedure.arch, procedure.recipe, X, y, spec, procedure.solver)
