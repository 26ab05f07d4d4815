"""a. Batched training vs one model at a time: MLP shadow models (SGD) and logistic regressions (Newton).

Each contender does the same work: the same training sets, the same initialisation and the same optimiser, so
the figures also report how far apart the trained models end up.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

from arena.engine import rng
from arena.engine.dense import Layers as Params
from arena.engine.dense import softmax, to_layers
from arena.engine.ensemble import init_state
from arena.engine.newton import fit_logreg, gradient
from arena.engine.recipe import Recipe
from arena.engine.trainer import train
from benchmarks.data import architecture, fixed_plus_one, init_layers, random_subsets
from benchmarks.timing import CPU, Section, Table, compare, ratio

MLP = architecture("mlp", 64, 10, hidden=[16], activation="tanh")
CNN = architecture("cnn", 1, 8, 8, 10)
CNN_TARGET = 3.0
CNN_MISSED = (
    "A digits CNN step is compute-bound (3×3 convolutions on 8×8 and 4×4 maps), so batching K models under "
    "`vmap` mainly removes per-call Python and dispatch overhead; the convolutions themselves run as grouped "
    "convolutions of K groups, which oneDNN executes no faster per model than K separate small convolutions."
)
L2 = 1e-3
MLP_TARGET, LOGREG_TARGET = 5.0, 20.0
MLP_MISSED = (
    "At K=1 a training step is ~35 small torch operations whose fixed dispatch cost (a few µs each) is most of "
    "the step; batching shares that cost among K models, after which the batched step is bound by small "
    "batched matmuls ([101×64]·[64×16] per model), so on one core the gain over a lean K=1 loop is about 5×. "
    "What would raise it: fewer, fused operations per step (e.g. torch.compile of the step) or a second "
    "thread, which speeds up the batched call and not the K=1 loop."
)
LOGREG_MISSED = (
    "Fitting these small problems is compute-bound, not overhead-bound, so batching has little to remove. "
    "scikit-learn solves the binary problem in d+1 = 31 unknowns (~2–3 ms a fit here); the arena's batched "
    "Newton solves the 2-class softmax parameterisation: 62 unknowns, an explicit 62×62 Hessian per model and "
    "iteration (a [31×201]·[201×31] bmm plus assembly into 62×62, float64) and a 62×62 LU, about 8 iterations: "
    "~2 ms a model. A K=1 call spends about half its time on the same arithmetic, so batching gains ~2×. "
    "What would close part of the gap: a binary special case in arena/engine/newton.py (one 31×31 block, "
    "sigmoid instead of softmax, Cholesky; the Hessian assembly and the LU are over half of an iteration in "
    "the profile), and solving in chunks of ~128 models so that temporaries stay out of page-faulting "
    "allocations (25% faster at K=1000 in a measurement here); together ~3–4×. 20× over a good sequential "
    "solver is not reachable by batching on one core."
)


@dataclass(frozen=True)
class Sizes:
    mlp_models: int
    epochs: int
    logregs: int
    cnns: int
    cnn_n: int
    cnn_epochs: int
    logreg_n: int = 201


FULL = Sizes(mlp_models=256, epochs=100, logregs=1000, cnns=64, cnn_n=200, cnn_epochs=5)
QUICK = Sizes(mlp_models=8, epochs=5, logregs=20, cnns=4, cnn_n=64, cnn_epochs=1)


def torch_loop(X: torch.Tensor, y: torch.Tensor, init: Params, recipe: Recipe) -> Params:
    """What peers write: one nn.Module and one torch.optim.SGD per model, trained one after another.

    Starts from the arena's initialisation of each model, so the result is comparable parameter by parameter.
    """
    finals = []
    for k in range(len(X)):
        net = torch.nn.Sequential(torch.nn.Linear(64, 16), torch.nn.Tanh(), torch.nn.Linear(16, 10))
        with torch.no_grad():
            for layer, W, b in zip((net[0], net[2]), init[0::2], init[1::2]):
                layer.weight.copy_(W[k].T)
                layer.bias.copy_(b[k])
        opt = torch.optim.SGD(net.parameters(), lr=recipe.lr, momentum=recipe.momentum)
        for _ in range(recipe.epochs):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(X[k]), y[k]).backward()
            opt.step()
        finals.append([p.detach().T if p.ndim == 2 else p.detach() for p in net.parameters()])
    return [torch.stack(ps) for ps in zip(*finals)]


def cnn_torch_loop(X: torch.Tensor, y: torch.Tensor, recipe: Recipe, init: dict, seeds: torch.Tensor) -> dict:
    """What peers write for K CNNs: one nn.Module (the cnn plugin's) and one torch.optim.SGD per model, one model
    after another, from the arena's initialisation and on the arena's minibatches (its per-model shuffles), so
    the trained models are comparable parameter by parameter."""
    K, n, _ = X.shape
    images = X.reshape(K, n, *CNN.input_shape)
    keys = rng.Keys(seeds)
    perms = [rng.permutation(keys, rng.stream(rng.Purpose.SHUFFLE, e), n) for e in range(recipe.epochs)]
    finals = []
    for k in range(K):
        net = CNN.build()
        net.load_state_dict({name: v[k] for name, v in init.items()})
        opt = torch.optim.SGD(net.parameters(), lr=recipe.lr, momentum=recipe.momentum)
        for perm in perms:
            for start in range(0, n, recipe.batch_size):
                idx = perm[k, start : start + recipe.batch_size]
                opt.zero_grad()
                torch.nn.functional.cross_entropy(net(images[k, idx]), y[k, idx]).backward()
                opt.step()
        finals.append({name: p.detach() for name, p in net.state_dict().items()})
    return {name: torch.stack([f[name] for f in finals]) for name in finals[0]}


def _cnn(sizes: Sizes, repeats: int) -> tuple[Table, list, dict[str, str]]:
    K = sizes.cnns
    X, y = random_subsets("digits", sizes.cnn_n, K)
    seeds = torch.arange(K, dtype=torch.int64)
    init = init_state(CNN, seeds)

    def rec(r: int) -> Recipe:
        return Recipe(epochs=1 if r < 0 else sizes.cnn_epochs, lr=0.05, momentum=0.9, batch_size=32)

    batched, peers = f"arena: {K} CNNs in one call", f"torch nn.Module + optim.SGD: {K} loops"
    t = compare(
        {
            batched: lambda r: train(CNN, X, y, rec(r), seeds, seeds),
            peers: lambda r: cnn_torch_loop(X, y, rec(r), init, seeds),
        },
        repeats,
        clock=CPU,
    )
    ours, theirs = t.results[batched][-1], t.results[peers][-1]
    checks = [ratio(f"{K} CNNs: torch loop / batched", t, peers, batched, CNN_TARGET, why_missed=CNN_MISSED)]
    figures = {"CNN max |Δ parameter|, batched vs torch loop (float32)":
               f"{max(float((ours[k] - theirs[k]).abs().max()) for k in ours):.2e}"}
    caption = (
        f"{K} CNNs (the `cnn` plugin, {CNN.template().n_params:,} parameters) on 1×8×8 digits, each on its own "
        f"{sizes.cnn_n} records, batch 32, {sizes.cnn_epochs} epochs, lr 0.05, momentum 0.9 (CPU seconds)"
    )
    return Table(caption, t), checks, figures


def _max_diff(a: Params, b: Params) -> float:
    return max(float((p - q).abs().max()) for p, q in zip(a, b))


def _mlp(sizes: Sizes, repeats: int) -> tuple[Table, list, dict[str, str]]:
    K = sizes.mlp_models
    X, y = fixed_plus_one("digits", 100, K)
    recipe = Recipe(epochs=sizes.epochs, lr=0.5, momentum=0.9)
    seeds = torch.arange(K, dtype=torch.int64)
    init = init_layers(MLP, seeds)

    def some(repeat: int) -> int:  # the untimed warm-up trains two models only
        return 2 if repeat < 0 else K

    batched, one_at_a_time, peers = (
        f"arena: {K} models in one call",
        f"arena: {K} calls of K=1",
        f"torch nn.Module + optim.SGD: {K} loops",
    )
    t = compare(
        {
            batched: lambda r: to_layers(
                train(MLP, X[: some(r)], y[: some(r)], recipe, seeds[: some(r)], seeds[: some(r)])
            ),
            one_at_a_time: lambda r: [
                to_layers(train(MLP, X[k : k + 1], y[k : k + 1], recipe, seeds[k : k + 1], seeds[k : k + 1]))
                for k in range(some(r))
            ],
            peers: lambda r: torch_loop(X[: some(r)], y[: some(r)], [p[: some(r)] for p in init], recipe),
        },
        repeats,
        clock=CPU,
    )
    ours = t.results[batched][-1]
    singles = [torch.cat(ps) for ps in zip(*t.results[one_at_a_time][-1])]
    checks = [
        ratio(f"{K} MLPs: torch loop / batched", t, peers, batched, MLP_TARGET, why_missed=MLP_MISSED),
        ratio(f"{K} MLPs: arena K=1 calls / batched", t, one_at_a_time, batched, MLP_TARGET, why_missed=MLP_MISSED),
    ]
    figures = {
        "MLP max |Δ parameter|, batched vs torch loop (float32)": f"{_max_diff(ours, t.results[peers][-1]):.2e}",
        "MLP max |Δ parameter|, batched vs K=1 calls": f"{_max_diff(ours, singles):.2e}",
    }
    caption = (
        f"{K} MLPs 64→16→10 tanh on digits, each on |D⁻|=100 shared records + its own target (101 records), "
        f"full-batch gradient descent, {sizes.epochs} epochs, lr 0.5, momentum 0.9"
    )
    return Table(caption, t), checks, figures


def sklearn_loop(X: np.ndarray, y: np.ndarray, **options: object) -> np.ndarray:
    """[K, d+1] (coef, intercept) of scikit-learn's binary fit of the same objective, one problem at a time.

    The arena's 2-class softmax with (l2/2)||W||² equals sklearn's binary model with C = 2/(n·l2): at the optimum
    W = [-w/2, w/2], so its penalty is (l2/4)||w||² = ||w||²/(2Cn).
    """
    C = 2.0 / (X.shape[1] * L2)
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for Xk, yk in zip(X, y):
            clf = LogisticRegression(C=C, **options).fit(Xk, yk)
            out.append(np.append(clf.coef_[0], clf.intercept_[0]))
    return np.stack(out)


def _probs_binary(X: torch.Tensor, wc: np.ndarray) -> torch.Tensor:
    w = torch.from_numpy(wc).to(torch.float64)
    return torch.sigmoid(torch.einsum("knd,kd->kn", X.double(), w[:, :-1]) + w[:, -1:])


def _logreg(sizes: Sizes, repeats: int) -> tuple[Table, list, dict[str, str]]:
    K = sizes.logregs
    X, y = random_subsets("breast_cancer", sizes.logreg_n, K)
    Xd, Xn, yn = X.double(), X.double().numpy(), y.numpy()

    def some(repeat: int) -> int:
        return 2 if repeat < 0 else K

    batched, one_at_a_time, default, precise = (
        f"arena fit_logreg: {K} problems in one call",
        f"arena fit_logreg: {K} calls of K=1",
        f"sklearn LogisticRegression ×{K}, default lbfgs (tol 1e-4)",
        f"sklearn LogisticRegression ×{K}, newton-cg tol 1e-10",
    )
    t = compare(
        {
            batched: lambda r: fit_logreg(Xd[: some(r)], y[: some(r)], 2, L2),
            one_at_a_time: lambda r: [fit_logreg(Xd[k : k + 1], y[k : k + 1], 2, L2) for k in range(some(r))],
            default: lambda r: sklearn_loop(Xn[: some(r)], yn[: some(r)]),
            precise: lambda r: sklearn_loop(
                Xn[: some(r)], yn[: some(r)], solver="newton-cg", tol=1e-10, max_iter=10_000
            ),
        },
        repeats,
        clock=CPU,
    )
    W, b = t.results[batched][-1]
    ours = softmax(Xd @ W + b.unsqueeze(1))[..., 1]
    grad = torch.cat([g.flatten(1) for g in gradient(Xd, y, [W, b], L2)], dim=1).norm(dim=1).max()
    checks = [
        ratio(f"{K} logregs: sklearn default / batched", t, default, batched, LOGREG_TARGET, why_missed=LOGREG_MISSED),
        ratio(f"{K} logregs: sklearn newton-cg 1e-10 / batched", t, precise, batched, LOGREG_TARGET,
              why_missed=LOGREG_MISSED),
        ratio(f"{K} logregs: arena K=1 calls / batched", t, one_at_a_time, batched, LOGREG_TARGET,
              why_missed=LOGREG_MISSED),
    ]
    figures = {
        "logreg: largest gradient norm of the batched Newton solutions": f"{float(grad):.1e} (tolerance 1e-10)",
        "logreg: max |Δ probability| on the training sets, sklearn default vs batched Newton":
            f"{float((_probs_binary(X, t.results[default][-1]) - ours).abs().max()):.1e}",
        "logreg: max |Δ probability|, sklearn newton-cg 1e-10 vs batched Newton":
            f"{float((_probs_binary(X, t.results[precise][-1]) - ours).abs().max()):.1e}",
    }
    caption = (
        f"{K} logistic regressions on breast_cancer (30 features, 2 classes), each on its own random "
        f"{sizes.logreg_n} records, mean cross-entropy + (l2/2)||W||², l2 = {L2:g}, solved to the optimum"
    )
    return Table(caption, t), checks, figures


def run(quick: bool, repeats: int) -> Section:
    sizes = QUICK if quick else FULL
    section = Section(
        "a",
        "Batched vs one-at-a-time training",
        "Many small models trained by one batched call of the engine (a leading model axis K on every tensor) "
        "against the same models trained one after another: by the engine with K=1 and by the code peers "
        "write (a torch `nn.Module` + `torch.optim.SGD` loop; scikit-learn `LogisticRegression` fits). "
        "The MLP contenders start from identical parameters and run identical full-batch momentum steps. "
        "The CNNs train on minibatches, the torch loop on the very batches of the engine's per-model shuffles. "
        "Logistic regression is the 2-class softmax model the arena fits by batched Newton (float64, "
        "gradient norm <= 1e-10), against sklearn's binary fit of the same objective with C = 2/(n·l2).",
    )
    for part in (_mlp, _cnn, _logreg):
        table, checks, figures = part(sizes, repeats)
        section.tables.append(table)
        section.checks += checks
        section.figures.update(figures)
    return section
