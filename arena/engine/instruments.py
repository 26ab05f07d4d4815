"""Audit instruments: what a canary audit inserts into the DP-SGD ``train`` calls made inside ``instrumented``
(white-box gradient canaries, row presence) and the record of what the defense really ran: each call's mechanism,
each Laplace draw, and a digest of each state ``train`` returned (so the audit can tell whether the release is
that state or a post-processing of it)."""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import torch

from arena.contracts.recipe import DPNoise, Recipe
from arena.engine import rng


@dataclass(frozen=True, eq=False)
class GradientCanaries:
    """White-box gradient canaries of an audit (Nasr et al. 2023; Steinke, Nasr & Jagielski 2023): m per model.

    Canary j of model k is the Dirac gradient ``sign[k, j]·C·e_index[k, j]`` (C the clipping norm, so clipping
    leaves it unchanged), a coordinate of the flat parameter vector in the module's parameter order. When
    ``included[k, j]`` (the audit's secret, drawn by the caller), it takes part in every DP-SGD step of model k
    like an example: sampled with the step's Poisson rate q from the model's own counter stream
    (``Purpose.CANARY``, so that a model trains alike alone or in a batch) and added to the clipped sum before the
    noise."""

    index: torch.Tensor  # [K, m] int64
    sign: torch.Tensor  # [K, m] ±1
    included: torch.Tensor  # [K, m] bool

    def __post_init__(self) -> None:
        if self.index.ndim != 2 or self.sign.shape != self.index.shape or self.included.shape != self.index.shape:
            raise ValueError("need index, sign and included all [K, m]")
        if not bool(((self.sign == 1) | (self.sign == -1)).all()):
            raise ValueError("canary signs must be +1 or -1")

    def rows(self, sl: slice) -> GradientCanaries:
        return GradientCanaries(self.index[sl], self.sign[sl], self.included[sl])

    def contribution(
        self, seeds: rng.Keys, step: int, q: float, n_params: int, clip: float, dtype: torch.dtype,
        device: torch.device,
    ) -> torch.Tensor:
        """[K, P] the canaries that step ``step`` samples, in module parameter order."""
        if int(self.index.max()) >= n_params or int(self.index.min()) < 0:
            raise ValueError(f"canary coordinates must lie in [0, {n_params})")
        K, m = self.index.shape
        taken = self.included.to(device)
        if q < 1.0:
            taken = taken & rng.bernoulli(seeds, rng.stream(rng.Purpose.CANARY, step), m, q)
        out = torch.zeros(K, n_params, dtype=dtype, device=device)
        return out.scatter_add_(1, self.index.to(device), self.sign.to(device, dtype) * clip * taken.to(dtype))


@dataclass(frozen=True)
class Mechanism:
    """What one DP-SGD ``train`` call really ran: clipping norm, noise std / clip, Poisson rate and steps."""

    clip: float
    noise_multiplier: float
    sample_rate: float
    steps: int
    cover: str = "all"
    """Which records of the data the audit handed the defense the call trained on: ``all`` of them (in any
    order), ``cell:P:c`` exactly cell c of the P-cell ``hash_partition`` (a data-independent partition),
    ``subset:<digest>`` another set of them (the digest of its sorted indices), ``unknown`` (rows not found in
    that data, or different rows per model)."""


@dataclass(frozen=True)
class LaplaceDraw:
    """One Laplace mechanism a defense drew inside ``instrumented``: its scale b and, where the defense declared
    it, the L1 sensitivity Δ₁ the noise is calibrated to (then ε₀ = Δ₁/b; None: the draw cannot be accounted)."""

    scale: float
    l1_sensitivity: float | None


@dataclass(eq=False)
class AuditInstruments:
    """What an audit inserts into the next DP-SGD ``train`` call of K models made inside ``instrumented``: gradient
    canaries and row presence (see ``DPNoise``). ``calls`` counts the calls that took them, so an audit can tell a
    defense that never trained through the engine (and so never met its canaries) from one that did."""

    canaries: GradientCanaries | None = None
    present: torch.Tensor | None = None
    calls: int = 0
    runs: list[Mechanism] = field(default_factory=list)
    """The mechanism each instrumented call really ran, so an audit can recompute the claim from it."""
    laplace: list[LaplaceDraw] = field(default_factory=list)
    """The Laplace mechanisms drawn inside the block, composed with the runs by the claim check."""
    returned: list[str] = field(default_factory=list)
    """``state_digest`` of the state each instrumented call returned."""
    records: list[bytes] | None = None
    """``arena.engine.partition.record_digests`` of the records the audit handed the defense (None: not tracked)."""
    partitions: list[int] = field(default_factory=list)
    """The number of cells of each ``hash_partition`` drawn inside the block."""

    def locate(self, X: torch.Tensor, y: torch.Tensor) -> np.ndarray | None:
        """The indices, in ``records``, of a call's rows X [K, n, d], y [K, n] (the same rows for every model),
        or None where they cannot be told (not tracked, rows not among the records, rows differing per model)."""
        if self.records is None or X.shape[0] == 0:
            return None
        if X.shape[0] > 1 and not (torch.equal(X, X[:1].expand_as(X)) and torch.equal(y, y[:1].expand_as(y))):
            return None
        from arena.engine.digests import record_digests

        where = {d: i for i, d in reversed(list(enumerate(self.records)))}  # a duplicate record: its first row
        rows = [where.get(d) for d in record_digests(X[0], y[0])]
        return None if any(r is None for r in rows) else np.asarray(rows, np.int64)

    def cover(self, rows: np.ndarray | None) -> str:
        """``Mechanism.cover`` of a call on ``rows`` (``locate``)."""
        if rows is None or self.records is None:
            return "unknown"
        n = len(self.records)
        taken = np.unique(rows)
        if len(taken) == len({*self.records}) and len(rows) == n:
            return "all"
        from arena.engine.digests import digest_cells

        for parts in sorted(set(self.partitions)):
            cells = digest_cells(self.records, parts)
            c = int(cells[taken[0]]) if len(taken) else -1
            if len(rows) == len(taken) and np.array_equal(taken, np.flatnonzero(cells == c)):
                return f"cell:{parts}:{c}"
        return "subset:" + hashlib.sha256(taken.tobytes()).hexdigest()[:16]

    @property
    def armed(self) -> bool:
        """Whether the instruments carry canaries or a presence mask (else ``train`` runs as without them)."""
        return self.canaries is not None or self.present is not None


_INSTRUMENTS: contextvars.ContextVar[AuditInstruments | None] = contextvars.ContextVar("audit", default=None)


@contextlib.contextmanager
def instrumented(instruments: AuditInstruments) -> Iterator[AuditInstruments]:
    """Within the block, every ``train`` call of DP-SGD (any defense's, unchanged) gets ``instruments``' canaries
    and presence mask; a non-private ``train`` call raises, since canaries only make sense against a DP claim."""
    token = _INSTRUMENTS.set(instruments)
    try:
        yield instruments
    finally:
        _INSTRUMENTS.reset(token)


def active() -> AuditInstruments | None:
    """The instruments of the enclosing ``instrumented`` block, or None."""
    return _INSTRUMENTS.get()


def arm(dp: DPNoise | None, X: torch.Tensor, y: torch.Tensor, recipe: Recipe) -> DPNoise | None:
    """The DP-SGD settings a ``train`` call on X [K, n, ...], y [K, n] runs with inside an armed ``instrumented``
    block: ``dp`` with the audit's gradient canaries and its presence mask (restricted to the call's rows, in their
    order), the call's mechanism recorded in ``runs``; ``dp`` itself outside such a block. Every trainer that
    honours audits (the image engine's ``train``, the language models' ``train_lm``) arms its call here, so the
    claim check reads one record of what each ran. A call without noise inside an armed block is a ValueError."""
    from arena.engine.batching import steps_and_rate

    K, n = y.shape
    inst = active()
    if inst is None or not inst.armed:
        return dp
    if dp is None:
        raise ValueError("audit canaries need DP-SGD training (train(..., dp=...)); this call trains without noise")
    if inst.canaries is not None and inst.canaries.index.shape[0] != K:
        raise ValueError(f"the audit has canaries for {inst.canaries.index.shape[0]} models, train got {K}")
    rows = inst.locate(X, y)
    cover = inst.cover(rows)
    present = inst.present
    if present is not None and rows is not None:
        present = present[:, torch.as_tensor(rows, device=present.device)]  # the call's rows, in its order
    if present is not None and present.shape != (K, n):
        raise ValueError(f"the audit's presence mask is {tuple(present.shape)}, train got data for ({K}, {n})")
    canaries = inst.canaries
    if canaries is not None and cover.startswith("cell:"):
        # a call on one cell of a data-independent partition: canary j belongs to cell j mod P, like a record
        parts, cell = map(int, cover.split(":")[1:])
        mine = (torch.arange(canaries.index.shape[1]) % parts == cell).unsqueeze(0)
        canaries = GradientCanaries(canaries.index, canaries.sign, canaries.included & mine)
    inst.calls += 1
    steps, rate = steps_and_rate(n, recipe)
    inst.runs.append(Mechanism(dp.clip, dp.noise_multiplier, rate, steps, cover))
    return DPNoise(dp.clip, dp.noise_multiplier, canaries, present)


def state_digest(state: dict[str, torch.Tensor]) -> str:
    """SHA-256 of a state's names, dtypes, shapes and bytes: equal iff the tensors are bit for bit the same."""
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def record_return(state: dict[str, torch.Tensor]) -> None:
    """Inside an armed ``instrumented`` block, note the digest of the state a ``train`` call returns."""
    inst = active()
    if inst is not None and inst.armed:
        inst.returned.append(state_digest(state))


def record_laplace(scale: float, l1_sensitivity: float | None) -> None:
    """Inside an ``instrumented`` block, note a Laplace draw of scale b (calibrated to Δ₁ where declared)."""
    inst = active()
    if inst is not None:
        inst.laplace.append(LaplaceDraw(float(scale), None if l1_sensitivity is None else float(l1_sensitivity)))


def record_partition(parts: int) -> None:
    """Inside an ``instrumented`` block, note a ``hash_partition`` into ``parts`` cells."""
    inst = active()
    if inst is not None:
        inst.partitions.append(int(parts))
