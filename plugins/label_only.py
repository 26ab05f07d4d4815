"""Label-only membership inference (Choquette-Choo, Tramèr, Carlini & Papernot, "Label-Only Membership Inference
Attacks", ICML 2021): the attacker sees only the predicted label, never a probability.

A model classifies its training points correctly more robustly than unseen points, so the attack queries each
record under perturbations and counts how often the predicted label stays the true one: the data-augmentation
attack (for images, Section 4: the record and its 4d translations by exactly d pixels, |i| + |j| = d in the L1
distance, optionally each flipped) and the noise-robustness attack (Gaussian noise of
scale σ on the features: the paper's attack for tabular data). The unperturbed record is always one query, so
with no perturbation at all the attack is the gap attack (correct means member).
"""

from __future__ import annotations

import numpy as np
import torch
from pydantic import Field

from arena import Attack, MembershipGuess, MembershipView, PluginParams, hookimpl


class LabelOnlyParams(PluginParams):
    shift: int = Field(default=1, ge=0, description="images: d, every translation (i, j) with |i| + |j| = d "
                                                    "pixels (L1 distance exactly d; 4d of them), zero-filled")
    flip: bool = Field(default=False, description="images: also query each translation mirrored left-right")
    sigma: float = Field(default=0.1, ge=0.0, allow_inf_nan=False,
                         description="standard deviation of the Gaussian noise added to the features")
    draws: int = Field(default=16, ge=0, description="noisy copies of each record (0: no noise queries)")
    fpr: float = Field(default=0.1, gt=0.0, lt=1.0, description="population FPR the hard threshold is set for")


def translate(images: torch.Tensor, dy: int, dx: int) -> torch.Tensor:
    """``images`` [n, C, H, W] moved down by ``dy`` and right by ``dx`` pixels, zeros where nothing moved in."""
    H, W = images.shape[-2:]
    out = torch.zeros_like(images)
    out[..., max(dy, 0) : H + min(dy, 0), max(dx, 0) : W + min(dx, 0)] = (
        images[..., max(-dy, 0) : H + min(-dy, 0), max(-dx, 0) : W + min(-dx, 0)]
    )
    return out


def shifts(radius: int) -> list[tuple[int, int]]:
    """The paper's augmentation set for translation d = ``radius``: the record itself (0, 0) first, then every
    (dy, dx) at L1 distance exactly d, |dy| + |dx| = d (4d of them, sorted): 4d + 1 queries."""
    ring = sorted((i, j) for i in range(-radius, radius + 1) for j in range(-radius, radius + 1)
                  if abs(i) + abs(j) == radius)
    return [(0, 0)] if radius == 0 else [(0, 0), *ring]


def perturbations(X: torch.Tensor, input_shape: tuple[int, ...], p: LabelOnlyParams, seed: int) -> torch.Tensor:
    """Queries [Q, n, d] for records X [n, d]: the record itself; for images (``input_shape`` (C, H, W)) its
    translations and, with ``flip``, their mirror images; then ``draws`` copies with N(0, σ²) noise."""
    n = X.shape[0]
    queries = [X]
    if len(input_shape) == 3:
        images = X.reshape(n, *input_shape)
        views = [images, images.flip(-1)] if p.flip else [images]
        queries = [translate(v, dy, dx).reshape(n, -1) for v in views for dy, dx in shifts(p.shift)]
    if p.draws and p.sigma > 0:
        gen = torch.Generator().manual_seed(seed)
        noise = torch.randn((p.draws, *X.shape), generator=gen, dtype=X.dtype) * p.sigma
        queries.extend(X + noise)
    return torch.stack(queries)


def correct_fraction(labels_model, X: torch.Tensor, y: torch.Tensor, input_shape: tuple[int, ...],  # noqa: ANN001
                     p: LabelOnlyParams, seed: int) -> np.ndarray:
    """Per record, the fraction of its queries whose predicted label is the true label y (float64 [n])."""
    queries = perturbations(X, input_shape, p, seed)
    predicted = labels_model.predict(queries.reshape(-1, X.shape[1])).reshape(queries.shape[:2])
    return (predicted == y).double().mean(dim=0).numpy()


class LabelOnlyMIA(Attack):
    """Choquette-Choo et al.'s label-only attack: the score is the fraction of a record's perturbed queries that
    the target labels correctly; the hard threshold is the (1 - ``fpr``) quantile of the same score on the
    population (non-members of the target). The noise draws are seeded by the attack's seed, the same for
    challenge and population records."""

    name = "label-only"
    version = "2"
    game = "membership"
    threat_model = frozenset({"labels", "population"})
    Params = LabelOnlyParams
    params: LabelOnlyParams

    def run(self, view: MembershipView) -> MembershipGuess:
        p = self.params
        scores, reference = (correct_fraction(view.labels_model, X, y, view.input_shape, p, view.seed)
                             for X, y in ((view.challenge_X, view.challenge_y), (view.population_X, view.population_y)))
        threshold = float(np.quantile(reference, 1.0 - p.fpr))
        return MembershipGuess(scores=scores, decisions=scores > threshold)


@hookimpl
def register_attacks(register) -> None:  # noqa: ANN001
    register(LabelOnlyMIA)
