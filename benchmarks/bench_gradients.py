"""t. Gradient inversion: the arena's attacks against ``breaching``'s on the same model, batch and shared gradient.

The gradients game (scenarios/gradients.yaml's B = 1 track: digits, the MLP with 128 ReLU units pretrained for 10
epochs, no defense) makes the views; each repeat attacks its own trials. Both contenders get the same model θ₀ and
the same mean gradient and return one reconstruction per record; PSNR against the record (range 1, the game's
matching). When breaching does not import here (it needs torchvision built for this torch), the section says so
and measures nothing.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np

from arena.engine.recipe import Recipe
from arena.games.gradients import GradientsGame, GradientsGameSpec, GradientsView
from arena.games.gradients.quality import match, pairwise_mse, psnr
from arena.pipeline.procedure import TrainingProcedure
from arena_plugins.defenses import NonPrivate
from arena_plugins.gradient_attacks import DLG, IDLG, AnalyticFirstLayer, InvertingGradients
from benchmarks import peer_breaching
from benchmarks.data import architecture, dataset
from benchmarks.timing import CPU, Check, Section, Table, compare, ratio

ATTACKS = {"inverting-gradients": InvertingGradients, "dlg": DLG, "idlg": IDLG,
           "analytic-first-layer": AnalyticFirstLayer}
SPEED_TARGET = 1.0
PSNR_TARGET = -1.0
SPEED_MISSED = (
    "The arena runs Inverting Gradients' restarts together in one vmapped double backward; breaching runs them one "
    "after another through autograd with create_graph. A miss means the arena's per-iteration cost (torch.func's "
    "grad of grad) is higher than breaching's for this small model."
)
PSNR_MISSED = (
    "Both run Inverting Gradients' recipe (cosine distance, total variation, Adam with step decay, boxed records) "
    "with their own defaults for what the budget does not fix: breaching signs Adam's gradient, starts from "
    "Gaussian noise and weighs its total variation 0.2 (the arena: unsigned, uniform noise, 0.01). A miss is a "
    "difference of those defaults at this budget, not of the budget."
)


@dataclass(frozen=True)
class Budget:
    iterations: int
    restarts: int
    trials: int  # trials attacked per repeat


FULL = Budget(iterations=200, restarts=2, trials=4)  # scenarios/gradients.yaml's budget
QUICK = Budget(iterations=20, restarts=1, trials=1)


def game(repeats: int, budget: Budget) -> tuple[GradientsGame, list[GradientsView], float]:
    """The B = 1 no-defense game of scenarios/gradients.yaml (seed 0), its views for (repeats + 1) × trials
    trials (the last ``trials`` warm up), and the released model's test accuracy."""
    spec = GradientsGameSpec(name="gradients", batch_size=1, batches=(repeats + 1) * budget.trials, pretrain=500,
                             population=200, test=300)
    arch = architecture("mlp", 1, 8, 8, 10, hidden=[128], activation="relu")
    procedure = TrainingProcedure(NonPrivate(NonPrivate.Params()), arch,
                                  Recipe(epochs=10, batch_size=32, lr=0.1, momentum=0.9))
    g = GradientsGame(spec, dataset("digits"), 0)
    release = g.release(procedure)
    attack = InvertingGradients(InvertingGradients.Params())  # the views are the same for every attack
    return g, g.trial_views(attack, release, procedure), release.utility


def _arena(name: str, view: GradientsView, budget: Budget) -> tuple[np.ndarray, np.ndarray]:
    cls = ATTACKS[name]
    params = (cls.Params() if name == "analytic-first-layer"
              else cls.Params(iterations=budget.iterations, restarts=budget.restarts))
    guess = cls(params).run(view)
    labels = np.full(view.n_records, -1) if guess.labels is None else np.asarray(guess.labels)
    return guess.records, labels


def _breaching(name: str, view: GradientsView, cfg: Any) -> tuple[np.ndarray, np.ndarray]:
    module = view.model.module(0, train=True)
    gradients = [view.update[k] / view.clients for k, _ in module.named_parameters()]
    return peer_breaching.reconstruct(cfg, name, module, gradients, view.n_records, tuple(view.shape),
                                      view.n_classes, view.seed)


def _scores(g: GradientsGame, trial: int, records: np.ndarray, labels: np.ndarray) -> tuple[float, bool]:
    """(mean PSNR of the trial's records against their matched reconstructions, every label right)."""
    truth = g.dataset.X[g.batches[trial]]
    pairs = match(truth, records)
    mse = pairwise_mse(truth, records)[np.arange(len(truth)), pairs]
    right = bool(np.all(labels[pairs] == g.dataset.y[g.batches[trial]]))
    return float(psnr(mse, 1.0).mean()), right


def run(quick: bool, repeats: int) -> Section:
    budget = QUICK if quick else FULL
    why = peer_breaching.unavailable()
    section = Section("t", "Gradient inversion: the arena's attacks vs breaching's, same model, batch and gradient", "")
    if why is not None:
        section.what = (f"breaching not installed: `import breaching` failed here ({why}). It is a peer, not a "
                        "dependency: install it (and torchvision matching torch) beside the arena to run this pair.")
        section.figures["breaching"] = "not installed"
        return section
    g, views, utility = game(repeats, budget)
    T = budget.trials
    section.what = (
        "scenarios/gradients.yaml's B = 1 track (digits, MLP 64-128-10 ReLU, 10 epochs, test accuracy "
        f"{utility:.3f}), no defense, labels hidden; {T} trial(s) per repeat, each a different secret record, the "
        f"same view for both contenders. Budget: {budget.iterations} iterations and {budget.restarts} restart(s) "
        "each. Arena: the attack plugin's `run` on the view, in process. breaching "
        f"{peer_breaching.version()}: its attacker classes (`breaching.attacks.prepare_attack`) on the same θ₀ and "
        "mean gradient with its own configurations (`invertinggradients`, `deepleakage`; iDLG = `deepleakage` with "
        "`attack_type=optimization, label_strategy=iDLG`; `analytic` on the same MLP as a `Sequential`), budget "
        f"overridden: Inverting Gradients `optim.max_iterations={budget.iterations}`, DLG/iDLG "
        f"`optim.max_iterations={max(1, budget.iterations // peer_breaching.LBFGS_INNER)}` outer L-BFGS steps of 20 "
        f"iterations (= {budget.iterations} L-BFGS iterations), `restarts.num_trials={budget.restarts}`. Its total "
        "variation's filters, built for 3 channels, are cut to the grey images' one. Times in CPU seconds of this "
        "process per trial (torch on one thread); PSNR in dB, reconstructions clamped to [0, 1] on both sides. "
        "breaching's DLG (its joint attacker) returns, and scores its restarts with, the argmax of its label "
        "tensor's random initial value rather than the labels it optimised (`OptimizationJointAttacker."
        "reconstruct` keeps `labels`, not `_run_trial`'s result), so its DLG label count says nothing of its "
        "optimisation and its restart choice may not be its best."
    )
    warm = repeats * T
    tiny = Budget(iterations=2, restarts=1, trials=1)
    for name in ATTACKS:
        cfg = peer_breaching.config(name, budget.iterations, budget.restarts)  # outside the timing
        _arena(name, views[warm], tiny)  # warm-ups on a trial of their own, two iterations
        _breaching(name, views[warm], peer_breaching.config(name, tiny.iterations, tiny.restarts))
        arena_label, peer_label = f"arena {name}", f"breaching {name}"
        t = compare({
            arena_label: lambda r, name=name: [_arena(name, views[j], budget) for j in range(r * T, (r + 1) * T)],
            peer_label: lambda r, name=name, cfg=cfg: [_breaching(name, views[j], cfg)
                                                      for j in range(r * T, (r + 1) * T)],
        }, repeats, warmup=False, clock=CPU, scale={arena_label: 1.0 / T, peer_label: 1.0 / T})
        section.tables.append(Table(f"{name}: CPU seconds per trial", t))
        scores = {label: [_scores(g, r * T + i, rec, lab) for r, outs in enumerate(t.results[label])
                          for i, (rec, lab) in enumerate(outs)] for label in (arena_label, peer_label)}
        psnrs = {label: [p for p, _ in s] for label, s in scores.items()}
        section.figures[f"{name}: PSNR per trial, arena"] = ", ".join(f"{p:.1f}" for p in psnrs[arena_label])
        section.figures[f"{name}: PSNR per trial, breaching"] = ", ".join(f"{p:.1f}" for p in psnrs[peer_label])
        section.figures[f"{name}: median PSNR arena / breaching (dB); labels right"] = (
            f"{statistics.median(psnrs[arena_label]):.1f} / {statistics.median(psnrs[peer_label]):.1f}; "
            f"{sum(r for _, r in scores[arena_label])}/{len(scores[arena_label])} / "
            f"{sum(r for _, r in scores[peer_label])}/{len(scores[peer_label])}")
        section.figures[f"{name}: breaching time / arena time (median of repeats)"] = (
            f"{statistics.median(b / a for a, b in zip(t.seconds[arena_label], t.seconds[peer_label])):.2f}×")
        if name == "inverting-gradients":
            diff = [a - b for a, b in zip(psnrs[arena_label], psnrs[peer_label])]
            section.checks += [
                ratio("Inverting Gradients: breaching time / arena time, per trial", t, peer_label, arena_label,
                      SPEED_TARGET, why_missed=SPEED_MISSED),
                Check("Inverting Gradients: arena PSNR − breaching PSNR, median over trials", statistics.median(diff),
                      PSNR_TARGET, ">=", " dB", tuple(diff), PSNR_MISSED),
            ]
    return section
