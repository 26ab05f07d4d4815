"""The loop engine: K models trained one at a time, each module run as written in train mode (dropout on,
BatchNorm on batch statistics and updating its running statistics) with ordinary autograd, on the data's device
(CPU or CUDA): the reference the batched engine is tested against (``tests/engine/test_engines.py``).

It trains what the batched engine cannot reproduce per model (``architecture.loop_reason``: a module that draws
random numbers in training, such as dropout), and any model whose track asks for it (``engine: loop``). Its batches
are the batched engine's, per model (the per-model shuffle, or DP-SGD's Poisson samples, and the augmentation, from
the counter RNG keyed by the model's train seed). Without DP it takes the batched engine's optimiser
(``steps.HeavyBall``: momentum SGD, ``l2`` as weight decay on the weights, the moving average of ``ema``). DP-SGD
runs through Opacus (``_train_opacus``): ``PrivacyEngine.make_private`` with the same noise multiplier, clipping
norm and expected batch size q·n, ghost clipping (``grad_sample_mode="ghost"``) where Opacus has a sampler for
every trainable layer, else its per-sample hooks; ``torch.optim.SGD`` with the same momentum and weight decay; its
noise from a generator seeded by the model's train seed (so it differs from the batched engine's counter-RNG noise
in value, not in distribution). The claim stays the arena's accountant's (``arena.privacy.accounting``), which
``tests/engine/test_engines.py`` checks against Opacus' own accountants. What the module draws itself comes from
torch's generator seeded by ``module_seed`` of the model's train seed alone, so a model trains identically alone or
beside any others, in any position.
"""

from __future__ import annotations

import copy
import functools
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from arena.engine import rng
from arena.engine.architecture import Architecture, State, opacus_mode
from arena.engine.batching import steps_and_rate
from arena.engine.recipe import DPNoise, Recipe
from arena.engine.seeds import module_seed, seeded
from arena.engine.steps import MEMORY_BUDGET, HeavyBall, Noise, noise_of_step, shaped_like, stream


def train(
    arch: Architecture, X: torch.Tensor, y: torch.Tensor, recipe: Recipe, state: State, train_seeds: torch.Tensor,
    dp: DPNoise | None = None, budget: int = MEMORY_BUDGET,
) -> State:
    """Train K models on X [K, n, d], y [K, n] from ``state`` (left unmodified), one at a time; the same loss and
    update as ``trainer.train`` (mean cross-entropy, heavy-ball momentum; DP-SGD with ``dp``)."""
    parts = []
    for k in range(X.shape[0]):
        sl = slice(k, k + 1)
        one = {n: v[sl] for n, v in state.items()}
        with seeded(module_seed(int(train_seeds[k])), X.device):
            parts.append(_train_one(arch, X[sl], y[sl], recipe, one, train_seeds[sl], None, budget) if dp is None
                         else _train_opacus(arch, X[sl], y[sl], recipe, one, train_seeds[sl], dp.rows(sl), budget))
    return {n: torch.cat([p[n] for p in parts]) for n in state}


def _train_one(
    arch: Architecture, X: torch.Tensor, y: torch.Tensor, recipe: Recipe, state: State, train_seeds: torch.Tensor,
    dp: DPNoise | None, budget: int,
) -> State:
    """One model (a leading axis of 1 on every tensor, as the batched engine keeps it)."""
    template = arch.template()
    module = template.train_module
    names = list(template.trainable)
    with torch.no_grad():
        params = [state[k].clone() for k in names]
        buffers = {k: state[k].clone() for k in template.buffers}  # updated in place (BatchNorm's statistics)
        optimizer = HeavyBall(params, [k in template.penalised for k in names], recipe, arch.l2)
    sizes, shapes = [p[0].numel() for p in params], [p.shape for p in params]
    seeds = rng.Keys(train_seeds.to(X.device))
    n = X.shape[1]
    steps, q = steps_and_rate(n, recipe)
    noise = Noise(seeds, steps, template.n_params, X.dtype, functools.partial(shaped_like, shapes, sizes))
    one_buffers = {k: v[0] for k, v in buffers.items()}  # views: the module's updates land in ``buffers``

    def loss(ps: list[torch.Tensor], x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(module, ({**dict(zip(names, ps)), **one_buffers}), (x,)), t)

    per_call = max(1, budget // max(1, 8 * template.n_params))
    per_example = vmap(grad(lambda ps, x, t: loss(ps, x.unsqueeze(0), t.unsqueeze(0))), in_dims=(None, 0, 0),
                       randomness="different")  # each example its own dropout mask, as in a batch

    for step, (Xb, yb, valid) in enumerate(stream(arch, X, y, recipe, seeds, dp)):
        images = Xb[0].reshape(Xb.shape[1], *arch.input_shape)
        if dp is None:
            ps = [p[0].detach().requires_grad_() for p in optimizer.params]
            grads = [g.unsqueeze(0) for g in torch.autograd.grad(loss(ps, images, yb[0]), ps)]
            step_noise = None
        else:
            sums = [torch.zeros_like(p) for p in optimizer.params]
            ps = [p[0] for p in optimizer.params]
            for start in range(0, images.shape[0], per_call):
                sl = slice(start, start + per_call)
                g = per_example(ps, images[sl], yb[0, sl])
                sq = sum(t.reshape(t.shape[0], -1).square().sum(-1) for t in g)
                factor = (dp.clip / (q * n) / sq.sqrt()).clamp(max=1.0 / (q * n))
                if valid is not None:
                    factor = factor * valid[0, sl].to(factor.dtype)
                for total, t in zip(sums, g):
                    total[0] += torch.einsum("b,b...->...", factor, t)
            canary = None
            if dp.canaries is not None:
                flat = dp.canaries.contribution(seeds, step, q, template.n_params, dp.clip, X.dtype, X.device)
                canary = shaped_like(shapes, sizes, flat)
            grads, step_noise = sums, noise_of_step(sums, canary, noise, step, dp, q * n)
        with torch.no_grad():
            optimizer.step(grads, step_noise)
    released = dict(zip(names, optimizer.result()))
    return {k: released[k] if k in released else buffers[k] for k in state}


def _train_opacus(
    arch: Architecture, X: torch.Tensor, y: torch.Tensor, recipe: Recipe, state: State, train_seeds: torch.Tensor,
    dp: DPNoise, budget: int,
) -> State:
    """One model (leading axis of 1) by DP-SGD through Opacus, on the arena's Poisson batches (``dp.present``'s
    absent rows never sampled) and with its gradient canaries (added to the clipped sum before the noise)."""
    template = arch.template()
    module = copy.deepcopy(template.train_module).train().to(device=X.device, dtype=X.dtype)
    with torch.no_grad():
        module.load_state_dict({k: v[0] for k, v in state.items()}, strict=True)
    names = [k for k, _ in module.named_parameters()]
    params = [p for _, p in module.named_parameters()]
    n = X.shape[1]
    _, q = steps_and_rate(n, recipe)
    expected = q * n
    decay = {k: (arch.l2 if k in template.penalised else 0.0) for k in names}
    sgd = torch.optim.SGD([{"params": [p for k, p in zip(names, params) if decay[k] == w], "weight_decay": w}
                           for w in sorted(set(decay.values()))], lr=recipe.lr, momentum=recipe.momentum)
    wrapped, optimizer, criterion = _make_private(arch, module, sgd, X, y, dp, expected, int(train_seeds[0]))
    shape = functools.partial(shaped_like, [torch.Size((1, *p.shape)) for p in params], [p.numel() for p in params])
    seeds = rng.Keys(train_seeds.to(X.device))
    canary: list[torch.Tensor] = []
    add_noise = optimizer.add_noise

    def canaries_then_noise() -> None:  # the canaries are examples' clipped gradients: into the sum, then noise
        for p, c in zip(params, canary):
            total = p.summed_grad  # type: ignore[attr-defined]  # Opacus' attribute
            total.add_(c[0].to(total.dtype))
        add_noise()

    optimizer.add_noise = canaries_then_noise
    average = [p.detach().clone() for p in params] if recipe.ema else None
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Full backward hook is firing")  # inputs need no gradient
        for step, (Xb, yb, valid) in enumerate(stream(arch, X, y, recipe, seeds, dp)):
            rows = slice(None) if valid is None else valid[0]
            images, labels = Xb[0][rows].reshape(-1, *arch.input_shape), yb[0][rows]
            if dp.canaries is not None:
                canary[:] = shape(dp.canaries.contribution(seeds, step, q, template.n_params, dp.clip, X.dtype,
                                                           X.device))
            optimizer.zero_grad(set_to_none=True)
            if images.shape[0] == 0:  # an empty Poisson sample: the noise (and canaries) alone, as Opacus would
                for p in params:
                    p.summed_grad = torch.zeros_like(p)  # type: ignore[attr-defined]  # Opacus' attribute
                optimizer.add_noise()
                torch._foreach_div_([p.grad for p in params if p.grad is not None], expected)
                sgd.step()
            else:
                criterion(wrapped(images), labels).backward()
                optimizer.step()
            if average is not None:
                with torch.no_grad():
                    torch._foreach_mul_(average, recipe.ema)
                    torch._foreach_add_(average, [p.detach() for p in params], alpha=1.0 - recipe.ema)
    out = {k: v.detach().unsqueeze(0).clone() for k, v in module.state_dict().items()}
    if average is not None:
        out.update({k: a.unsqueeze(0) for k, a in zip(names, average)})
    return {k: out[k] for k in state}


def _make_private(
    arch: Architecture, module: torch.nn.Module, sgd: torch.optim.Optimizer, X: torch.Tensor, y: torch.Tensor,
    dp: DPNoise, expected: float, seed: int,
) -> tuple[torch.nn.Module, Any, Any]:
    """``PrivacyEngine.make_private`` of one model: (its wrapped module, DP optimiser, loss). Opacus' data loader
    is not used (the arena's Poisson batches are; ``poisson_sampling=False`` so it leaves them alone), and the
    optimiser's expected batch size is set to q·n exactly (make_private's is ``int(n / len(loader))``)."""
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    mode = opacus_mode(arch)
    generator = torch.Generator(X.device).manual_seed(module_seed(seed, "opacus-noise") % 2**63)
    loader = DataLoader(TensorDataset(X[0], y[0]), batch_size=max(1, round(expected)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # secure_mode off, its RNG not cryptographic: the arena's seeds decide
        private = PrivacyEngine().make_private(
            module=module, optimizer=sgd, data_loader=loader, noise_multiplier=dp.noise_multiplier,
            max_grad_norm=dp.clip, poisson_sampling=False, grad_sample_mode=mode, noise_generator=generator,
            **({"criterion": torch.nn.CrossEntropyLoss()} if mode == "ghost" else {}))
    optimizer = private[1]
    optimizer.expected_batch_size = expected
    return private[0], optimizer, private[2] if mode == "ghost" else torch.nn.CrossEntropyLoss()


def opacus_epsilon(noise_multiplier: float, q: float, steps: int, delta: float, accountant: str = "rdp") -> float:
    """Opacus' own ε (add/remove) for ``steps`` Poisson-subsampled Gaussian steps (its ``rdp`` or ``prv``
    accountant), to check the arena's accountant against; the arena's claims never use it."""
    from opacus.accountants import PRVAccountant, RDPAccountant

    acc = {"rdp": RDPAccountant, "prv": PRVAccountant}[accountant]()
    acc.history = [(noise_multiplier, q, steps)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(acc.get_epsilon(delta))


UserFit = Callable[..., torch.nn.Module | None]
"""A user's training function ``fit(model, X, y, seed) -> model`` (plain PyTorch)."""


def train_user(
    arch: Architecture, X: torch.Tensor, y: torch.Tensor, state: State, train_seeds: torch.Tensor, fit: UserFit,
    **extra: object,
) -> State:
    """Train K models on X [K, n, d], y [K, n] one at a time with a user's function: model k is a fresh module of
    ``arch`` holding row k of ``state`` (the arena's seeded initialisation), in train mode on X's device, and
    ``fit(module, X[k] as [n, *input_shape], y[k], seed)`` trains it as its author trains it (their optimiser,
    scheduler, augmentation, mixed precision), ``seed`` the model's train seed; ``extra`` keywords go to ``fit``
    too. Torch's generator is seeded by ``module_seed`` of the seed first, so a function that draws without
    seeding is still reproducible. Returns the trained tensors, stacked (``ValueError`` when ``fit`` returns
    something else than a module of the same tensor names and shapes)."""
    parts = []
    for k in range(X.shape[0]):
        seed = int(train_seeds[k])
        with torch.random.fork_rng(devices=[]):
            module = arch.build()
        module = module.to(X.device)
        with torch.no_grad():
            for name, t in [*module.named_parameters(), *module.named_buffers()]:
                if name in state:
                    t.copy_(state[name][k].to(t.dtype))
        module.train()
        images = X[k].reshape(X.shape[1], *arch.input_shape)
        with seeded(module_seed(seed), X.device):
            out = fit(module, images, y[k], seed, **extra)
        trained = module if out is None else out
        if not isinstance(trained, torch.nn.Module):
            raise ValueError(f"the user's fit returned a {type(trained).__name__}, not the torch.nn.Module it trained")
        tensors = {n: t.detach() for n, t in [*trained.named_parameters(), *trained.named_buffers()]}
        missing = [n for n in state if n not in tensors or tensors[n].shape != state[n].shape[1:]]
        if missing:
            raise ValueError(f"the user's fit returned a module without the model's tensors {', '.join(missing[:5])} "
                             "(or with other shapes): return the module it was given, trained")
        parts.append({n: tensors[n].to(state[n].device, state[n].dtype) for n in state})
    return {n: torch.stack([p[n] for p in parts]) for n in state}
