"""What both engines share to take a step: the recipe's batches of a model's data (``stream``), DP-SGD's noise of
each step from the counter RNG (``Noise``), and the heavy-ball optimiser (``HeavyBall``). The batched engine
(``arena.engine.trainer``) and the loop engine (``arena.engine.loop``) import them from here, so neither imports
the other's module to train.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import NamedTuple

import torch

from arena.engine import dpsgd, rng
from arena.engine.architecture import Architecture
from arena.engine.batching import Batch, augmented, batches, poisson_batches
from arena.engine.dense import Layers
from arena.engine.recipe import DPNoise, Recipe

MEMORY_BUDGET = int(float(os.environ.get("ARENA_MEMORY_BUDGET_MB", "1024")) * 2**20)
"""Bytes one training call may spend on per-example gradients and activations (``ARENA_MEMORY_BUDGET_MB``)."""


def stream(
    arch: Architecture, X: torch.Tensor, y: torch.Tensor, recipe: Recipe, seeds: rng.Keys, dp: DPNoise | None
) -> Iterator[Batch]:
    if dp is not None:
        present = None if dp.present is None else dp.present.to(X.device)
        source = poisson_batches(X, y, recipe, seeds, present)
    else:
        source = batches(X, y, recipe, seeds)
    return augmented(source, arch, recipe.augment, seeds)


NOISE_BLOCK = 1 << 17
"""Normals (steps × models × parameters) one draw of DP-SGD noise makes: several steps at once while that few."""


class Noise:
    """DP-SGD's [K, P] standard normals of each step, in the module's parameter order, each step's exactly as drawn
    alone (its own stream). ``add_`` adds them into a step's sums, by the compiled kernel where it runs, which never
    writes them out; else (and for ``layers``) they are drawn several steps per call when K·P is small (a draw's
    fixed cost is most of it at K = 1) into reused buffers, so that the steps allocate no noise-sized memory."""

    def __init__(
        self, seeds: rng.Keys, steps: int, n_params: int, dtype: torch.dtype,
        shape: Callable[[torch.Tensor], list[torch.Tensor]] | None = None,
    ) -> None:
        self.seeds, self.steps, self.n_params, self.dtype = seeds, steps, n_params, dtype
        self.block = max(1, min(steps, NOISE_BLOCK // max(1, len(seeds) * n_params)))
        self.workspace, self.first, self.draws = rng.Workspace(), -1, torch.empty(0)
        self.shape = shape
        self._views: dict[tuple[int, int, tuple[int, ...]], list[torch.Tensor]] = {}
        self._adders: dict[tuple, rng.NormalAdder | None] = {}

    def __call__(self, step: int) -> torch.Tensor:
        """Step ``step``'s normals; valid until a step of the next block is asked for."""
        if not self.first <= step < self.first + self.draws.shape[0]:
            self.first = step
            ids = [rng.stream(rng.Purpose.NOISE, t) for t in range(step, min(self.steps, step + self.block))]
            self.draws = rng.normal(self.seeds, ids, self.n_params, self.dtype, self.workspace)
        return self.draws[step - self.first]

    def add_(self, step: int, sums: list[torch.Tensor], alpha: float,
             then: tuple[rng.HeavyBallPlan, list[torch.Tensor]] | None = None) -> bool:
        """``sums += alpha ·`` step ``step``'s normals shaped as ``layers`` gives them: in one pass of the compiled
        kernel (``rng.NormalAdder``) where every sum lies in the parameters' order as its noise view does (both
        training paths' sums do), never writing the normals out, and ``then`` taken in the same pass (True); else
        drawn, then added, and ``then`` left to the caller (False)."""
        adder = self._adder(sums)
        if adder is not None and adder(self.seeds, rng.stream(rng.Purpose.NOISE, step), alpha, sums, then):
            return True
        torch._foreach_add_(sums, self.layers(step), alpha=alpha)
        return False

    def _adder(self, sums: list[torch.Tensor]) -> rng.NormalAdder | None:
        """The kernel's adder for sums of this layout, made once per layout; None unless every sum is float32 on the
        CPU with its noise view's strides."""
        key = tuple((s.shape, s.stride(), s.dtype, s.device) for s in sums)
        if key not in self._adders:
            template = torch.empty(len(self.seeds), self.n_params, device="meta")  # strides and offsets only
            layout = [] if self.shape is None else self.shape(template)
            same = len(sums) == len(layout) and all(
                shape[1:] == v.shape[1:] and stride[1:] == v.stride()[1:] and dtype == torch.float32
                and device.type == "cpu" for (shape, stride, dtype, device), v in zip(key, layout))
            self._adders[key] = rng.NormalAdder(
                [(tuple(shape), stride, int(v.storage_offset())) for (shape, stride, _, _), v in zip(key, layout)],
                self.n_params) if same else None
        return self._adders[key]

    def layers(self, step: int) -> list[torch.Tensor]:
        """Step ``step``'s normals cut and shaped like the parameters by ``shape`` (views): the views of each slot of
        the reused buffers are made once, not at every step (at K = 1 their reshapes cost ~30 µs a step)."""
        assert self.shape is not None
        flat = self(step)
        key = (step - self.first, flat.data_ptr(), tuple(flat.shape))
        views = self._views.get(key)
        if views is None:
            views = self._views[key] = self.shape(flat)
        return views


class StepNoise(NamedTuple):
    """DP-SGD's noise of step ``step`` still to be added to the gradient: ``alpha`` times ``source``'s normals."""

    source: Noise
    step: int
    alpha: float


def noise_of_step(sums: Layers, canary: Layers | None, noise: Noise, step: int, dp: DPNoise, expected: float
                ) -> StepNoise:
    """DP-SGD's ``noisy_gradient`` on clipped sums already divided by the ``expected`` batch size, split where the
    optimizer fuses it: the canaries added now, the noise left to ``HeavyBall.step``."""
    dpsgd.add_canary_(sums, canary, expected, divided=True)
    return StepNoise(noise, step, dpsgd.noise_alpha(dp.clip, dp.noise_multiplier, expected, divided=True))


class HeavyBall:
    """Momentum SGD on K stacked models in place: v ← μv + g (+ l2·w on weights); w ← w − lr·v; optionally an
    exponential moving average of the iterates (``recipe.ema``), which ``result`` then returns."""

    def __init__(self, params: list[torch.Tensor], penalised: list[bool], recipe: Recipe, l2: float) -> None:
        self.params, self.recipe = params, recipe
        self.velocity = [torch.zeros_like(p) for p in params]
        self.average = [p.clone() for p in params] if recipe.ema else None
        self.decay = [l2 if pen else 0.0 for pen in penalised]
        """Each tensor's weight decay: l2 on the penalised (weights), 0 on the rest."""
        self.plan = rng.HeavyBallPlan(params, self.decay, recipe.momentum, recipe.lr)

    def step(self, grads: list[torch.Tensor], noise: StepNoise | None = None) -> None:
        """One update of every tensor, as multi-tensor (``_foreach``) kernels like ``torch.optim.SGD``'s. The caller
        hands ``grads`` over (fresh tensors nothing else holds): they become the new velocity, g + μv made in place
        in them, so that an update makes two passes over the parameters' size, not three. ``noise``: DP-SGD's noise
        of a step, still to be added to ``grads``: in the same single pass as the update where the compiled kernel
        runs (the arithmetic below, in its order), else first."""
        fused = noise is not None and noise.source.add_(noise.step, grads, noise.alpha, (self.plan, self.velocity))
        if not fused:
            for g, p, decay in zip(grads, self.params, self.decay):
                if decay:
                    g.add_(p, alpha=decay)
            torch._foreach_add_(grads, self.velocity, alpha=self.recipe.momentum)
            torch._foreach_add_(self.params, grads, alpha=-self.recipe.lr)
        self.velocity = grads
        if self.average is not None:
            torch._foreach_mul_(self.average, self.recipe.ema)
            torch._foreach_add_(self.average, self.params, alpha=1.0 - self.recipe.ema)

    def result(self) -> list[torch.Tensor]:
        """The released parameters: the moving average when the recipe keeps one, else the last iterate."""
        return self.params if self.average is None else self.average


def shaped_like(shapes: list[torch.Size], sizes: list[int], flat: torch.Tensor) -> list[torch.Tensor]:
    """[K, P] numbers in the module's parameter order, cut into ``sizes`` per model and shaped as ``shapes``
    (views)."""
    return [part.reshape(shape) for shape, part in zip(shapes, torch.split(flat, sizes, dim=1))]
