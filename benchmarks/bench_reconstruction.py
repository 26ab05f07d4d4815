"""d. The closed-form GLM reconstruction vs IBM ART's DatabaseReconstruction, which refits inside an optimiser."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import art
import numpy as np
import torch
from art.attacks.inference.reconstruction import DatabaseReconstruction
from art.estimators.classification.scikitlearn import ScikitlearnLogisticRegression
from sklearn.linear_model import LogisticRegression

from arena.engine.dense import Layers as Params
from arena.engine.newton import fit_logreg
from arena_plugins.reconstruction import glm_closed_form
from benchmarks.data import fixed_plus_one
from benchmarks.timing import Check, Section, Table, compare, ratio

FIXED, L2 = 200, 1e-3
SPEED_TARGET = 100.0
SPEED_MISSED = (
    "ART's time is (objective evaluations) × (one scikit-learn refit each), with d+1 evaluations per "
    "finite-difference gradient and one L-BFGS run per class; it is short only when L-BFGS stops after a few "
    "iterations, which is when its reconstruction is poorest. The closed form is a handful of tensor operations."
)
ERROR_MISSED = (
    "The closed form is exact at the optimum; its error is set by how far the release is from it (gradient "
    "norm <= 1e-10 here), divided by the target's residual. A miss would mean a release not solved to the "
    "optimum, e.g. an SGD-trained one, where the closed form does not apply."
)


@dataclass(frozen=True)
class Sizes:
    batch: int
    features: int


FULL = Sizes(batch=100, features=30)
QUICK = Sizes(batch=10, features=5)  # ART's cost grows with the features (one refit per finite difference)


def art_estimator(W: torch.Tensor, b: torch.Tensor, X: np.ndarray, y: np.ndarray) -> ScikitlearnLogisticRegression:
    """The released 2-class model as the equivalent sklearn binary model, for ART.

    coef = W[:,1] - W[:,0] and C = 2/(n·l2) (see benchmarks.bench_batched.sklearn_loop). ART refits clones of
    this estimator inside its optimiser, so the solver is the precise newton-cg at tol 1e-10: ART's
    finite-difference gradients need refits that agree with the release far below their step.
    """
    clf = LogisticRegression(C=2.0 / (len(y) * L2), solver="newton-cg", tol=1e-10, max_iter=10_000).fit(X, y)
    clf.coef_ = (W[:, 1] - W[:, 0]).numpy()[None].copy()
    clf.intercept_ = np.array([float(b[1] - b[0])])
    return ScikitlearnLogisticRegression(model=clf)


def art_reconstruct(estimator: ScikitlearnLogisticRegression, fixed_X: np.ndarray, fixed_y: np.ndarray):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x, y = DatabaseReconstruction(estimator).reconstruct(fixed_X, fixed_y)
    return x[0], int(y[0].argmax())


def run(quick: bool, repeats: int) -> Section:
    sizes = QUICK if quick else FULL
    section = Section(
        "d",
        "Closed-form GLM reconstruction vs ART's refit-inside-an-optimiser",
        f"Informed adversary against logistic regression on breast_cancer: D⁻ = {FIXED} known records, one "
        f"unknown target per released model, l2 = {L2:g}; each release is trained to its optimum by the arena's "
        "batched Newton solver. Arena: `glm-reconstruction`'s closed form (`glm_closed_form`, one K=1 call per "
        "target), which reads the target off the optimality conditions. Baseline: IBM ART "
        f"{art.__version__} `DatabaseReconstruction` on the same release expressed as the equivalent "
        "scikit-learn binary model (ART requires a scikit-learn estimator): for each class it runs "
        "`scipy.optimize.fmin_l_bfgs_b` with finite-difference gradients over the unknown record, every "
        "objective evaluation a full refit of `LogisticRegression` on D⁻ ∪ {x} (newton-cg, tol 1e-10, the "
        "refit precision that gives ART its best chance), starting from the first known record. Each repeat "
        "attacks a different target; time per target; error = mean squared error of the reconstructed "
        "record (features in [0, 1])."
        + (f" Quick mode: only the first {sizes.features} features." if quick else ""),
    )
    X, y = fixed_plus_one("breast_cancer", FIXED, max(repeats, sizes.batch))
    X = X[..., : sizes.features]
    W, b = fit_logreg(X.double(), y, 2, L2)
    fixed_X, fixed_y = X[0, :FIXED].double(), y[0, :FIXED]
    targets = X[:, FIXED].double().numpy()

    def closed_form(r: int) -> tuple[np.ndarray, int]:
        k = max(r, 0)
        params: Params = [W[k : k + 1], b[k : k + 1]]
        records, labels = glm_closed_form(params, fixed_X, fixed_y, L2)
        return records[0].numpy(), int(labels[0])

    def art_attack(r: int) -> tuple[np.ndarray, int]:
        estimator = art_estimator(W[r], b[r], X[r].double().numpy(), y[r].numpy())
        return art_reconstruct(estimator, fixed_X.numpy(), fixed_y.numpy())

    closed_form(-1)  # warm-up; ART (tens of seconds a target) is not run twice
    arena, baseline = "arena closed form", "ART DatabaseReconstruction"
    t = compare({arena: closed_form, baseline: art_attack}, repeats, warmup=False)
    section.tables.append(Table("seconds per target (one target per repeat)", t))

    def errors(label: str) -> np.ndarray:
        return np.array([((rec - targets[r]) ** 2).mean() for r, (rec, _) in enumerate(t.results[label])])

    def labels_right(label: str) -> str:
        right = sum(lab == int(y[r, FIXED]) for r, (_, lab) in enumerate(t.results[label]))
        return f"{right}/{len(t.results[label])}"

    mse_arena, mse_art = errors(arena), errors(baseline)
    section.checks += [
        ratio("ART time / closed-form time, per target", t, baseline, arena, SPEED_TARGET, why_missed=SPEED_MISSED),
        Check("reconstruction MSE: ART / closed form (closed form more accurate when > 1)",
              float(np.median(mse_art / mse_arena)), 1.0, ">=", "×", tuple(mse_art / mse_arena), ERROR_MISSED),
    ]
    section.figures.update({
        "closed form: MSE per target": ", ".join(f"{e:.1e}" for e in mse_arena),
        "ART: MSE per target": ", ".join(f"{e:.1e}" for e in mse_art),
        "labels recovered (closed form / ART)": f"{labels_right(arena)} / {labels_right(baseline)}",
    })
    all_at_once = compare(
        {f"closed form, {sizes.batch} targets in one call": lambda r: glm_closed_form([W, b], fixed_X, fixed_y, L2)},
        repeats,
    )
    section.tables.append(Table(f"the game's use: all {sizes.batch} released models attacked in one call",
                                all_at_once))
    return section
