"""The boundary-distance label-only attack (Choquette-Choo, Tramèr, Carlini & Papernot, "Label-Only Membership
Inference Attacks", ICML 2021, Section 5; Li & Zhang, "Membership Leakage in Label-Only Exposures", CCS 2021):
a member lies farther from the decision boundary than a non-member, and the attacker measures the L2 distance
with HopSkipJump (Chen, Jordan & Wainwright, S&P 2020), a decision-based adversarial attack that needs only
predicted labels.

For each record (x, y) the target labels correctly: start from a uniform-noise point the target mislabels, binary
search towards x onto the boundary, then iterate: estimate the boundary's normal from the labels of B_t random
points around the boundary point (B_t = B_0 √t, at most ``max_evals``, at radius δ_t = √d θ d_{t-1}; δ_1 = 0.1),
step along it by ξ_t = d_{t-1}/√t halved until the point is still mislabelled, and binary search back onto the
boundary (to θ = γ / d^{3/2} in blend units). The score is the final distance ‖x_adv - x‖₂; a record the target
already mislabels scores 0. Features live in [0, 1] (the dataset contract), so every query is clipped to it.

Every record has a budget of ``max_queries`` label queries, counted by the attack: a phase that would overspend
it stops that record's search, keeping its last point that is mislabelled (so the distance is always that of a
real adversarial point, an upper bound on the true distance). All records advance together in each phase
(tensor operations over records, no loop over examples).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from pydantic import Field

from arena import Attack, MembershipGuess, MembershipView, PluginParams, hookimpl

QUERY_CHUNK = 1 << 15
"""Rows per label query: within the sandbox's per-query limit, whatever the view's size."""
MAX_HALVINGS = 30
"""Step-size halvings per iteration before a record keeps its previous point for that iteration."""
ELEMENTS = 1 << 23
"""Floats of random directions held at once in the gradient estimate (records are taken in groups to fit)."""


class BoundaryParams(PluginParams):
    max_queries: int = Field(default=1000, ge=2, le=1_000_000, description="label queries per record")
    iterations: int = Field(default=20, ge=0, le=10_000, description="HopSkipJump iterations at most")
    initial_evals: int = Field(default=20, ge=1, le=100_000, description="B_0: queries of the first gradient "
                               "estimate (B_t = B_0 √t)")
    max_evals: int = Field(default=200, ge=1, le=100_000, description="most queries of one gradient estimate")
    gamma: float = Field(default=1.0, gt=0.0, le=1e6, description="binary-search tolerance θ = γ / d^(3/2)")
    init_tries: int = Field(default=20, ge=1, le=10_000, description="uniform-noise draws to find a mislabelled "
                            "starting point")
    population_records: int = Field(default=100, ge=1, le=1_000_000, description="population records attacked "
                                    "to set the hard threshold")
    fpr: float = Field(default=0.1, gt=0.0, lt=1.0, description="population FPR the hard threshold is set for")


class Budget:
    """Label queries on behalf of n records, each with its own count and the same limit."""

    def __init__(self, labels_model, y: torch.Tensor, limit: int) -> None:  # noqa: ANN001
        self.labels_model, self.y, self.limit = labels_model, y, limit
        self.used = np.zeros(len(y), dtype=np.int64)

    def affords(self, rows: np.ndarray, count: int) -> np.ndarray:
        """Which of ``rows`` can still spend ``count`` queries."""
        return self.used[rows] + count <= self.limit

    def mislabelled(self, rows: np.ndarray, Z: torch.Tensor) -> torch.Tensor:
        """[r, q] bool: does the target label each query Z [r, q, d] of record ``rows[i]`` other than its y?
        Charges q queries to each record."""
        r, q, d = Z.shape
        self.used[rows] += q
        assert np.all(self.used[rows] <= self.limit), "a record spent more than its budget"
        flat = Z.reshape(r * q, d)
        labels = torch.cat([self.labels_model.predict(part) for part in flat.split(QUERY_CHUNK)])
        return labels.reshape(r, q) != self.y[torch.from_numpy(rows)].unsqueeze(1)


def blend(x: torch.Tensor, z: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """(1 - α) x + α z per row."""
    return (1 - alpha.unsqueeze(1)) * x + alpha.unsqueeze(1) * z


def binary_search(budget: Budget, rows: np.ndarray, x: torch.Tensor, adv: torch.Tensor, theta: float) -> torch.Tensor:
    """Points on the segments from x [r, d] (labelled y) to adv [r, d] (mislabelled), within θ of the boundary in
    blend units (or as close as the budget allows), each still mislabelled."""
    low, high = torch.zeros(len(rows), dtype=x.dtype), torch.ones(len(rows), dtype=x.dtype)
    while True:
        live = ((high - low) > theta).numpy() & budget.affords(rows, 1)
        if not live.any():
            return blend(x, adv, high)
        idx = np.flatnonzero(live)
        mid = (low[idx] + high[idx]) / 2
        wrong = budget.mislabelled(rows[idx], blend(x[idx], adv[idx], mid).unsqueeze(1))[:, 0]
        high[idx] = torch.where(wrong, mid, high[idx])
        low[idx] = torch.where(wrong, low[idx], mid)


def starting_points(budget: Budget, rows: np.ndarray, d: int, tries: int,
                    gen: torch.Generator) -> tuple[torch.Tensor, np.ndarray]:
    """Uniform-noise points in [0, 1]^d the target mislabels, one per record of ``rows`` (HopSkipJump's
    initialisation), and which records found one within ``tries`` draws and their budget."""
    start = torch.zeros(len(rows), d)
    found = np.zeros(len(rows), dtype=bool)
    for _ in range(tries):
        idx = np.flatnonzero(~found & budget.affords(rows, 1))
        if len(idx) == 0:
            break
        noise = torch.rand(len(idx), d, generator=gen)
        wrong = budget.mislabelled(rows[idx], noise.unsqueeze(1))[:, 0].numpy()
        start[idx[wrong]] = noise[wrong]
        found[idx[wrong]] = True
    return start, found


def normal_estimate(budget: Budget, rows: np.ndarray, point: torch.Tensor, delta: torch.Tensor, evals: int,
                    gen: torch.Generator) -> torch.Tensor:
    """HopSkipJump's Monte-Carlo estimate of the boundary's normal at ``point`` [r, d] (pointing to the
    mislabelled side), unit length: mean of (φ_b - mean φ) u_b over ``evals`` unit directions u_b at radius δ,
    φ_b = ±1 the label test, each direction taken as the clipped step divided by δ; when every φ_b agrees, mean
    of φ_b u_b."""
    r, d = point.shape
    out = torch.empty_like(point)
    group = max(1, ELEMENTS // (evals * d))
    for s in range(0, r, group):
        p, dl = point[s : s + group], delta[s : s + group, None, None]
        u = torch.randn(len(p), evals, d, generator=gen)
        u = u / u.norm(dim=-1, keepdim=True)
        Z = (p.unsqueeze(1) + dl * u).clamp(0.0, 1.0)
        u = (Z - p.unsqueeze(1)) / dl
        phi = budget.mislabelled(rows[s : s + group], Z).to(point.dtype) * 2 - 1
        mean = phi.mean(dim=1, keepdim=True)
        phi = torch.where(mean.abs() == 1, phi, phi - mean)
        out[s : s + group] = (phi.unsqueeze(-1) * u).mean(dim=1)
    return out / out.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def boundary_distances(labels_model, X: torch.Tensor, y: torch.Tensor, p: BoundaryParams,  # noqa: ANN001
                       seed: int) -> tuple[np.ndarray, np.ndarray]:
    """L2 distance of each record X [n, d] to the target's decision boundary by HopSkipJump within the budget
    (0 where the target mislabels the record; √d, the diameter of [0, 1]^d, where no mislabelled point was
    found), and the queries each record spent."""
    X = X.reshape(len(X), -1).float()
    n, d = X.shape
    gen = torch.Generator().manual_seed(seed)
    budget = Budget(labels_model, y, p.max_queries)
    theta = p.gamma / (d * math.sqrt(d))
    everyone = np.arange(n)
    wrong = budget.mislabelled(everyone, X.unsqueeze(1))[:, 0].numpy()
    dist = np.where(wrong, 0.0, math.sqrt(d))
    rows = np.flatnonzero(~wrong)
    start, found = starting_points(budget, rows, d, p.init_tries, gen)
    rows, start = rows[found], start[found]
    x = X[torch.from_numpy(rows)]
    point = binary_search(budget, rows, x, start, theta)
    dist[rows] = (point - x).norm(dim=1).double().numpy()
    for t in range(1, p.iterations + 1):
        evals = min(int(p.initial_evals * math.sqrt(t)), p.max_evals)
        live = budget.affords(rows, evals + 1)  # the estimate and at least one step query
        if not live.any():
            break
        rows, x, point = rows[live], x[live], point[live]
        current = (point - x).norm(dim=1)
        delta = torch.full_like(current, 0.1) if t == 1 else (math.sqrt(d) * theta * current).clamp_min(1e-12)
        v = normal_estimate(budget, rows, point, delta, evals, gen)
        step, moved = current / math.sqrt(t), np.zeros(len(rows), dtype=bool)
        candidate = point.clone()
        for _ in range(MAX_HALVINGS):
            idx = np.flatnonzero(~moved & budget.affords(rows, 1))
            if len(idx) == 0:
                break
            z = (point[idx] + step[idx, None] * v[idx]).clamp(0.0, 1.0)
            ok = budget.mislabelled(rows[idx], z.unsqueeze(1))[:, 0].numpy()
            candidate[idx[ok]] = z[ok]
            moved[idx[ok]] = True
            step[idx[~ok]] /= 2
        went = np.flatnonzero(moved)
        point[went] = binary_search(budget, rows[went], x[went], candidate[went], theta)
        dist[rows] = np.minimum(dist[rows], (point - x).norm(dim=1).double().numpy())
    return dist, budget.used


class BoundaryMIA(Attack):
    """The boundary-distance attack: each record's L2 distance to the target's decision boundary by
    HopSkipJump from predicted labels alone, at most ``max_queries`` per record (module docstring); farther
    means member. The hard threshold is the (1 - ``fpr``) quantile of the distances of ``population_records``
    population records (non-members of the target), drawn with the attack's seed."""

    name = "boundary"
    game = "membership"
    threat_model = frozenset({"labels", "population"})
    Params = BoundaryParams
    params: BoundaryParams

    def run(self, view: MembershipView) -> MembershipGuess:
        p = self.params
        scores, _ = boundary_distances(view.labels_model, view.challenge_X, view.challenge_y, p, view.seed % 2**63)
        n_pop = len(view.population_y)
        pick = torch.from_numpy(np.sort(np.random.default_rng(view.seed).permutation(n_pop)[: p.population_records]))
        reference, _ = boundary_distances(view.labels_model, view.population_X[pick], view.population_y[pick], p,
                                          (view.seed + 1) % 2**63)
        threshold = float(np.quantile(reference, 1.0 - p.fpr))
        return MembershipGuess(scores=scores, decisions=scores > threshold)


@hookimpl
def register_attacks(register) -> None:  # noqa: ANN001
    register(BoundaryMIA)
