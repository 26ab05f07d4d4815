"""Train K copies of a model at once with momentum SGD or DP-SGD, batched over models.

Every model's randomness (shuffles, Poisson samples, augmentation, noise) comes from its own train seed through
the counter RNG, and models are chunked only along the model axis, so a model trains identically (to float
tolerance) alone or inside any batch. Dense models (logistic regression, MLPs) take the hand-written path, which
``make bench`` shows faster; every other module trains through ``torch.func``, in train mode (BatchNorm on batch
statistics, its running statistics updated in each model's own buffers). A module that draws random numbers in
training (dropout) trains on the loop engine (``arena.engine.loop``), one model at a time with its own seeded draws.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable, Iterator
from typing import Literal, NamedTuple

import torch

from arena.engine import dense as hand
from arena.engine import dpsgd, instruments, rng
from arena.engine.architecture import Architecture, State, batched_problem, loop_reason
from arena.engine.batching import Batch, augmented, batches, model_passes, poisson_batches, steps_and_rate
from arena.engine.dense import Layers
from arena.engine.ensemble import init_state
from arena.engine.functional import PassShape, clipped_sum, examples_per_call, mean_gradient, pass_shape
from arena.engine.recipe import DPNoise, Recipe

Engine = Literal["auto", "functional", "dense", "loop"]

MEMORY_BUDGET = int(float(os.environ.get("ARENA_MEMORY_BUDGET_MB", "1024")) * 2**20)
"""Bytes one training call may spend on per-example gradients and activations (``ARENA_MEMORY_BUDGET_MB``)."""


def _with_instruments(dp: DPNoise | None, X: torch.Tensor, y: torch.Tensor, recipe: Recipe) -> DPNoise | None:
    K, n = y.shape
    inst = instruments.active()
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
        raise ValueError(f"the audit's presence mask is {tuple(inst.present.shape)}, train got data for ({K}, {n})")
    canaries = inst.canaries
    if canaries is not None and cover.startswith("cell:"):
        # a call on one cell of a data-independent partition: canary j belongs to cell j mod P, like a record
        parts, cell = map(int, cover.split(":")[1:])
        mine = (torch.arange(canaries.index.shape[1]) % parts == cell).unsqueeze(0)
        canaries = instruments.GradientCanaries(canaries.index, canaries.sign, canaries.included & mine)
    inst.calls += 1
    steps, rate = steps_and_rate(n, recipe)
    inst.runs.append(instruments.Mechanism(dp.clip, dp.noise_multiplier, rate, steps, cover))
    return DPNoise(dp.clip, dp.noise_multiplier, canaries, present)


def choose_engine(arch: Architecture, engine: Engine = "auto") -> Literal["functional", "dense", "loop"]:
    """The loop engine for a module the batched engine cannot train as written (``loop_reason``) or whose track
    asks for it (``arch.engine == "loop"``), else the hand path for dense models (faster, see
    benchmarks/results.md), ``torch.func`` for everything else. ``engine`` overrides ``arch.engine`` unless
    ``auto``. Asking for a batched path for a module that needs the loop is a ``ValueError`` naming why."""
    if engine == "auto":
        engine = {"auto": "auto", "loop": "loop", "batched": "auto"}[arch.engine]
        if arch.engine == "batched" and (problem := batched_problem(arch)):
            raise ValueError(problem)
    reason = loop_reason(arch)
    if engine in ("dense", "functional") and reason is not None:
        raise ValueError(f"model {arch.model.name!r} cannot train on the batched engine: {reason}")
    if engine == "dense" and arch.dense is None:
        raise ValueError(f"model {arch.model.name!r} has no hand-written path")
    if engine == "auto":
        return "loop" if reason is not None else "dense" if arch.dense is not None else "functional"
    return engine


def models_per_chunk(arch: Architecture, recipe: Recipe, n: int, dp: DPNoise | None, budget: int) -> int:
    """How many models one chunk may train so that its per-example gradients and activations fit ``budget``."""
    params = arch.template().n_params
    batch = min(recipe.batch_size or n, n)
    per_model = 4 * (4 * params + 32 * batch * arch.n_features) + (4 * params * min(batch, 64) if dp else 0)
    return max(1, budget // max(per_model, 1))


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
"""glibc's ``mallopt`` parameters (malloc.h)."""
HEAP_KEPT = 512 << 20
"""Bytes glibc's malloc serves from its heap, and keeps free there, rather than mapping and unmapping them."""


@functools.cache
def _keep_freed_memory() -> None:
    """Once per process, have glibc's malloc serve blocks up to ``HEAP_KEPT`` from its heap and keep that much of
    freed memory there. By default it maps each block past an adaptive threshold (32 MiB at most) afresh and gives
    freed memory past twice that back, so a step's multi-megabyte temporaries fault their pages in at every step:
    an MLP epoch of 64 models took ~5,000-30,000 page faults and ran ~8-20% slower; the digits CNN's DP-SGD epoch
    of 64 models ~14,000 and ~10% slower (a grouped convolution's forward on fresh pages took 2-3× as long). No-op
    where the C library has no ``mallopt``, or with ``ARENA_MALLOC=0``."""
    if os.environ.get("ARENA_MALLOC", "1") == "0":
        return
    try:
        mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    except OSError:
        return
    if mallopt is not None:
        if not mallopt(M_MMAP_THRESHOLD, HEAP_KEPT):  # a glibc that caps the threshold: its own cap
            mallopt(M_MMAP_THRESHOLD, 32 << 20)
        mallopt(M_TRIM_THRESHOLD, HEAP_KEPT)


def train(
    arch: Architecture,
    X: torch.Tensor,
    y: torch.Tensor,
    recipe: Recipe,
    init_seeds: torch.Tensor,
    train_seeds: torch.Tensor,
    dp: DPNoise | None = None,
    state: State | None = None,
    engine: Engine = "auto",
    budget: int = MEMORY_BUDGET,
) -> State:
    """Train K models on X [K,n,d], y [K,n]; loss = mean CE + (l2/2)||weights||², heavy-ball momentum.

    Starts from ``state`` if given (left unmodified), else from ``init_seeds``; follows X's dtype and device.
    """
    K, n, d = X.shape
    if y.shape != (K, n) or init_seeds.shape != (K,) or train_seeds.shape != (K,):
        raise ValueError(f"need y [K,n] and seeds [K] for X of shape {tuple(X.shape)}")
    if d != arch.n_features:
        raise ValueError(f"X has {d} features, the model expects {arch.n_features} (input shape {arch.input_shape})")
    dp = _with_instruments(dp, X, y, recipe)
    _keep_freed_memory()
    if state is None:
        state = init_state(arch, init_seeds, X.dtype, X.device)
    path = choose_engine(arch, engine)
    if path == "loop":
        from arena.engine import loop  # it builds on this module

        out = loop.train(arch, X, y, recipe, state, train_seeds, dp, budget)
        instruments.record_return(out)
        return out
    size = models_per_chunk(arch, recipe, n, dp, budget)
    parts = []
    for s in range(0, K, size):
        sl = slice(s, s + size)
        part = {k: v[sl] for k, v in state.items()}
        run = _train_dense if path == "dense" else _train_functional
        parts.append(run(arch, X[sl].contiguous(), y[sl].contiguous(), recipe, part, train_seeds[sl],
                         dp if dp is None else dp.rows(sl), budget))
    out = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    instruments.record_return(out)
    return out


def _stream(
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


def _step_noise(sums: Layers, canary: Layers | None, noise: Noise, step: int, dp: DPNoise, expected: float
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


StepSums = Callable[[list[torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor | None], list[torch.Tensor]]
"""A step's per-model sums [K, ...] (the mean gradient, or DP-SGD's clipped sum) of (per-model tensors, X, y,
validity mask)."""


def _in_passes(sums: StepSums, per_model: list[torch.Tensor], Xb: torch.Tensor, yb: torch.Tensor,
               valid: torch.Tensor | None, shape: PassShape) -> list[torch.Tensor]:
    """``sums(per_model, Xb, yb, valid)`` over ``batching.model_passes``: the models in passes of like Poisson
    counts, each padded to its largest. Every model's sums are its own (gradients never mix models), so they are
    the same in any pass."""
    K, B = Xb.shape[:2]
    passes = model_passes(valid, K, B, shape.models, shape.rows)
    if len(passes) == 1:
        return sums(per_model, Xb, yb, valid)
    out: list[torch.Tensor] = []
    for models, rows in passes:  # a slice is a view; indices gather (and the sums scatter back)
        part = sums([t[models] for t in per_model], Xb[models, :rows], yb[models, :rows],
                    None if valid is None else valid[models, :rows])
        out = out or [p.new_zeros(K, *p.shape[1:]) for p in part]
        for o, p in zip(out, part):
            o[models] = p
    return out


def _train_dense(
    arch: Architecture, X: torch.Tensor, y: torch.Tensor, recipe: Recipe, state: State,
    train_seeds: torch.Tensor, dp: DPNoise | None, budget: int,
) -> State:
    """The hand path: explicit backprop and ghost-norm clipping for stacks of linear layers."""
    spec = arch.dense
    assert spec is not None  # ``choose_engine`` picks "dense" only for a dense stack
    names = list(state)
    layers = [p.clone() for p in hand.to_layers(state)]
    optimizer = HeavyBall(layers, [i % 2 == 0 for i in range(len(layers))], recipe, arch.l2)
    seeds = rng.Keys(train_seeds.to(X.device))
    n = X.shape[1]
    steps, q = steps_and_rate(n, recipe)
    noise = Noise(seeds, steps, spec.n_params, X.dtype, functools.partial(hand.unflatten_module_order, spec))
    clip = 0.0 if dp is None else dp.clip

    def clipped(ls: list[torch.Tensor], Xs: torch.Tensor, ys: torch.Tensor, vs: torch.Tensor | None) -> Layers:
        inputs, out = hand.layer_inputs(spec, ls, Xs)
        deltas = hand.backprop(spec, ls, inputs, hand.output_delta(out, ys))
        return dpsgd.clipped_sum(inputs, deltas, clip, vs, scale=1.0 / (q * n))

    for t, (Xb, yb, valid) in enumerate(_stream(arch, X, y, recipe, seeds, dp)):
        if dp is None:
            inputs, out = hand.layer_inputs(spec, layers, Xb)
            deltas = hand.backprop(spec, layers, inputs, hand.output_delta(out, yb) / Xb.shape[1])
            grads, step_noise = hand.sum_gradients(inputs, deltas), None
        else:
            sums = clipped(layers, Xb, yb, valid)  # one pass: cutting the padding saves nothing on this path
            canary = None
            if dp.canaries is not None:
                flat = dp.canaries.contribution(seeds, t, q, spec.n_params, dp.clip, X.dtype, X.device)
                canary = hand.unflatten_module_order(spec, flat)
            grads, step_noise = sums, _step_noise(sums, canary, noise, t, dp, q * n)
        optimizer.step(grads, step_noise)
    return hand.to_state(names, optimizer.result())


def shaped_like(shapes: list[torch.Size], sizes: list[int], flat: torch.Tensor) -> list[torch.Tensor]:
    """[K, P] numbers in the module's parameter order, cut into ``sizes`` per model and shaped as ``shapes``
    (views)."""
    return [part.reshape(shape) for shape, part in zip(shapes, torch.split(flat, sizes, dim=1))]


def _train_functional(
    arch: Architecture, X: torch.Tensor, y: torch.Tensor, recipe: Recipe, state: State,
    train_seeds: torch.Tensor, dp: DPNoise | None, budget: int,
) -> State:
    """Any module through ``torch.func``: ``vmap(grad)`` over models, and over examples for DP-SGD."""
    template = arch.template()
    params = {k: state[k].clone() for k in template.trainable}
    buffers = {k: state[k].clone() for k in template.buffers}  # BatchNorm's running statistics update in place
    names = list(params)
    optimizer = HeavyBall([params[k] for k in names], [k in template.penalised for k in names], recipe, arch.l2)
    sizes = [params[k][0].numel() for k in names]
    seeds = rng.Keys(train_seeds.to(X.device))
    K, n = X.shape[:2]
    shape = pass_shape(arch, min(recipe.batch_size or n, n), X.dtype, X.device)
    per_call = examples_per_call(arch, min(K, shape.models), budget, X.dtype)
    shapes = [params[k].shape for k in names]
    steps, q = steps_and_rate(n, recipe)
    noise = Noise(seeds, steps, template.n_params, X.dtype, functools.partial(shaped_like, shapes, sizes))
    clip, kept = (0.0 if dp is None else dp.clip), len(names)

    per_model = [params[k] for k in names] + [buffers[k] for k in template.buffers]  # updated in place

    def split(tensors: list[torch.Tensor]) -> tuple[State, State]:  # ``per_model``'s order → (params, buffers)
        return dict(zip(names, tensors[:kept])), dict(zip(template.buffers, tensors[kept:]))

    def clipped(tensors: list[torch.Tensor], Xs: torch.Tensor, ys: torch.Tensor, vs: torch.Tensor | None) -> Layers:
        sums = clipped_sum(arch, *split(tensors), Xs, ys, vs, clip, per_call, scale=1.0 / (q * n))
        return [sums[k] for k in names]

    def mean(tensors: list[torch.Tensor], Xs: torch.Tensor, ys: torch.Tensor, _: torch.Tensor | None) -> Layers:
        g = mean_gradient(arch, *split(tensors), Xs, ys)
        return [g[k] for k in names]

    for t, (Xb, yb, valid) in enumerate(_stream(arch, X, y, recipe, seeds, dp)):
        images = Xb.reshape(K, Xb.shape[1], *arch.input_shape)
        if dp is None:
            grads, step_noise = _in_passes(mean, per_model, images, yb, None, shape), None
        else:
            sums = _in_passes(clipped, per_model, images, yb, valid, shape)
            canary = None
            if dp.canaries is not None:
                flat = dp.canaries.contribution(seeds, t, q, template.n_params, dp.clip, X.dtype, X.device)
                canary = shaped_like(shapes, sizes, flat)
            grads, step_noise = sums, _step_noise(sums, canary, noise, t, dp, q * n)
        optimizer.step(grads, step_noise)
    released = dict(zip(names, optimizer.result()))
    return {k: released[k] if k in released else buffers[k] for k in state}
