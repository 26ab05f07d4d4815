"""Built-in gradient-inversion attacks (the ``gradients`` game).

* ``analytic-first-layer``: a first linear layer with bias gives ∇W_i = Σ_n δ_{n,i} x_n and ∇b_i = Σ_n δ_{n,i} per
  row i, so x = ∇W_i/∇b_i wherever one record alone made row i's gradient (every row, for one record: Phong et al.
  2017; Geiping et al. 2020, Prop. D.1); rows that agree on a ratio are taken as one record's.
* ``informed-exact``: the informed adversary (Balle et al. 2022) knows every record of the update but the target:
  it subtracts their gradients from the update, which leaves the target's own gradient, and solves the first
  layer for it exactly (one local step, no defense; otherwise the same solve on what is left).
* ``dlg``: Deep Leakage from Gradients (Zhu et al. 2019): dummy records and soft labels optimised jointly by L-BFGS
  to match the update in squared Euclidean distance.
* ``idlg``: improved DLG (Zhao et al. 2020): the labels first, analytically from the output layer's gradient, then
  the records as in DLG (L-BFGS).
* ``inverting-gradients``: Geiping et al. 2020: cosine distance between the updates plus total variation, Adam
  with step decay, records boxed to the data's range, the best of several restarts.

The optimisation attacks start from uniform noise seeded by the view. DLG and iDLG use the papers' L-BFGS by
default (``optimiser: adam`` runs every restart at once with Adam instead); Inverting Gradients runs every restart at
once (``torch.func.vmap``) with Adam, as its paper does.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field, PositiveFloat, PositiveInt

from arena import Attack, GradientsGuess, GradientsView, PluginParams, Track, hookimpl
from arena_plugins.gradient_inversion import (
    Functional,
    clamp_range,
    first_linear,
    output_layer,
    recover_labels,
    rows_solve,
    target_update,
)
from arena_plugins.gradient_invert import Optimiser, invert

DENSE_MODELS = ("mlp", "logreg")


def dense_only(track: Track, attack: str) -> str | None:
    if track.model.name not in DENSE_MODELS:
        return (f"{attack} needs a first linear layer with a bias reading the record (models "
                f"{', '.join(DENSE_MODELS)}); {track.model.name!r} has none")
    return None


def _guess(view: GradientsView, records: torch.Tensor, labels: torch.Tensor | None) -> GradientsGuess:
    flat = clamp_range(records.detach().reshape(view.n_records, -1).to(torch.float64), view)
    return GradientsGuess(records=flat.numpy(), labels=None if labels is None else labels.detach().numpy())


class AnalyticParams(PluginParams):
    tolerance: PositiveFloat = Field(default=1e-3, le=1.0, description="rows whose ratios differ by less (RMS, in "
                                     "units of the data's range) are one record's")


class AnalyticFirstLayer(Attack):
    """x = ∇W_i/∇b_i on the first linear layer; identical ratios of several rows mark a record recovered exactly."""

    name = "analytic-first-layer"
    game = "gradients"
    threat_model = frozenset({"parameters", "population"})
    Params = AnalyticParams
    params: AnalyticParams

    def skip_reason(self, track: Track) -> str | None:
        return dense_only(track, self.name)

    def run(self, view: GradientsView) -> GradientsGuess:
        f = Functional(view)
        update = target_update(view)
        weight, bias = first_linear(f, view.n_features)
        gW, gb = update[weight].to(torch.float64), update[bias].to(torch.float64)
        N = view.n_records
        labels = recover_labels(view, f, update)
        if N == 1:
            return _guess(view, rows_solve(gW, gb)[None], labels)
        lo, hi = view.data_range
        live = torch.nonzero(gb.abs() > 1e-12 * gb.abs().max().clamp(min=1e-300)).flatten()
        live = live[torch.argsort(gb[live].abs(), descending=True)]
        ratios = clamp_range(gW[live] / gb[live, None], view)
        clusters: list[list[int]] = []  # indices into ``ratios``, grouped by agreement
        tol = self.params.tolerance * (hi - lo)
        for i in range(len(ratios)):
            for c in clusters:
                if torch.sqrt(((ratios[i] - ratios[c[0]]) ** 2).mean()) < tol:
                    c.append(i)
                    break
            else:
                clusters.append([i])
        clusters.sort(key=lambda c: (-len(c), -float(gb[live[c]].abs().sum())))
        chosen = [ratios[c].mean(0) for c in clusters[:N]]
        fill = view.population_X.to(torch.float64).mean(0).reshape(-1)
        records = torch.stack(chosen + [fill] * (N - len(chosen)))
        return _guess(view, records, labels)


class InformedExact(Attack):
    """The target's gradient is the update less the known records' gradients; its first layer gives the target."""

    name = "informed-exact"
    game = "gradients"
    threat_model = frozenset({"parameters", "fixed-set"})

    def skip_reason(self, track: Track) -> str | None:
        return dense_only(track, self.name)

    def run(self, view: GradientsView) -> GradientsGuess:
        f = Functional(view)
        update = target_update(view)
        N = view.n_records
        known_X, known_y = view.known_X.to(torch.float64), view.known_y.long()
        f.to(torch.float64)
        residual = {k: N * v.to(torch.float64) for k, v in update.items()}
        if len(known_y):
            for k, g in f.per_example(known_X, known_y).items():
                residual[k] = residual[k] - g.sum(0)
        weight, bias = first_linear(f, view.n_features)
        x = rows_solve(residual[weight], residual[bias])
        out_w, out_b = output_layer(f)
        score = residual[out_b] if out_b is not None else residual[out_w].sum(1)
        records = torch.cat([known_X.reshape(len(known_y), view.n_features), x[None]])
        labels = torch.cat([known_y, score.argmin().reshape(1)])
        return _guess(view, records, labels)


class InversionParams(PluginParams):
    iterations: PositiveInt = Field(default=300, le=100_000)
    lr: PositiveFloat = Field(default=0.1, le=10.0)
    restarts: PositiveInt = Field(default=4, le=256)
    tv: float = Field(default=0.0, ge=0.0, le=10.0, description="weight of the total variation (images)")


class DLGParams(InversionParams):
    optimiser: Optimiser = Field(default="lbfgs", description="lbfgs: the papers' L-BFGS (strong-Wolfe line search; "
                                 "iterations are L-BFGS iterations, restarts run one after another); adam: Adam, "
                                 "every restart at once (lr about 0.1)")
    lr: PositiveFloat = Field(default=1.0, le=10.0, description="L-BFGS's step (1: the papers'); Adam's rate")


class _Inversion(Attack):
    game = "gradients"
    threat_model = frozenset({"parameters", "population"})
    Params = InversionParams
    params: InversionParams
    distance: Literal["l2", "cosine"]
    learn_labels: bool
    boxed: bool
    decay: bool

    def run(self, view: GradientsView) -> GradientsGuess:
        f = Functional(view)
        update = target_update(view)
        labels = None if self.learn_labels else recover_labels(view, f, update)
        p = self.params
        records, found = invert(f, update, view, labels=labels, distance=self.distance, iterations=p.iterations,
                                lr=p.lr, restarts=p.restarts, tv=p.tv, boxed=self.boxed, decay=self.decay,
                                optimiser=p.optimiser if isinstance(p, DLGParams) else "adam")
        return _guess(view, records, found)


class DLG(_Inversion):
    """Zhu et al. 2019: records and labels from noise, squared Euclidean gradient distance, L-BFGS."""

    name = "dlg"
    Params = DLGParams
    distance = "l2"
    learn_labels = True
    boxed = False
    decay = False


class IDLG(_Inversion):
    """Zhao et al. 2020: the labels analytically, then DLG on the records (L-BFGS)."""

    name = "idlg"
    Params = DLGParams
    distance = "l2"
    learn_labels = False
    boxed = False
    decay = False


class IGParams(InversionParams):
    tv: float = Field(default=1e-2, ge=0.0, le=10.0, description="weight of the total variation (images)")


class InvertingGradients(_Inversion):
    """Geiping et al. 2020: cosine distance + total variation, Adam with step decay, boxed records, restarts."""

    name = "inverting-gradients"
    Params = IGParams
    distance = "cosine"
    learn_labels = False
    boxed = True
    decay = True


@hookimpl
def register_attacks(register) -> None:  # noqa: ANN001 - the registry's callback
    for cls in (AnalyticFirstLayer, InformedExact, DLG, IDLG, InvertingGradients):
        register(cls)
