"""What the engine makes of an architecture (``arena.contracts.architecture.Architecture``, named here for the
engine): its module as a stateless function (``template``), which engine trains it and why, and how a BatchNorm
module trains under per-example clipping."""

from __future__ import annotations

import copy
import functools

import torch

from arena.contracts.architecture import Architecture, Template
from arena.contracts.architecture import State as State
from arena.engine import ghost_plan
from arena.engine.groupnorm import batch_norms

RANDOM_LAYERS: tuple[type[torch.nn.Module], ...] = (
    torch.nn.modules.dropout._DropoutNd, torch.nn.RReLU, torch.nn.FractionalMaxPool2d, torch.nn.FractionalMaxPool3d)
"""torch.nn layers that draw random numbers in train mode (every dropout, AlphaDropout included)."""


def random_layers(module: torch.nn.Module) -> list[str]:
    """The names of ``module``'s layers that draw random numbers in train mode (dropout with p = 0 does not)."""
    return [name or "<root>" for name, m in module.named_modules()
            if isinstance(m, RANDOM_LAYERS) and not (isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p == 0)]


def _draws_in_forward(module: torch.nn.Module, input_shape: tuple[int, ...]) -> bool:
    """Whether a copy of ``module`` in train mode maps the same two records differently under two seeds of torch's
    generator (random numbers drawn in ``forward`` itself, e.g. ``F.dropout(x, p, self.training)``). A module that
    does not run on two Gaussian records, or runs only on an accelerator, counts as not drawing."""
    probe = copy.deepcopy(module).train()
    device = next(iter(probe.parameters()), torch.empty(0)).device
    if device.type == "meta":
        return False
    outputs = []
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            x = torch.randn(2, *input_shape, generator=torch.Generator().manual_seed(0)).to(device)
            for seed in (1, 2):
                torch.manual_seed(seed)
                outputs.append(probe(x))
    except Exception:  # noqa: BLE001 - a module that does not run here fails loudly when it trains
        return False
    a, b = outputs
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and not torch.equal(a, b)


@functools.lru_cache(maxsize=32)
def template(arch: Architecture) -> Template:
    training = arch.build().train()
    module = copy.deepcopy(training).eval()
    names = tuple(n for n, _ in module.named_parameters())
    buffers = tuple(n for n, _ in module.named_buffers())
    penalised = frozenset(n for n, p in module.named_parameters() if p.ndim >= 2)
    random = tuple(random_layers(training)) or (("forward",) if _draws_in_forward(training, arch.input_shape) else ())
    return Template(module, names, buffers, penalised, ghost_plan.plan(training, arch.input_shape), training, random)


def loop_reason(arch: Architecture) -> str | None:
    """Why the batched engine cannot train ``arch`` as its module trains (so the loop engine does), or None."""
    random = arch.template().random
    if not random:
        return None
    where = "its forward" if random == ("forward",) else f"layers {', '.join(random)}"
    return (f"the module draws random numbers in training ({where}: dropout or the like), which the batched engine "
            "cannot draw per model from the model's own seed")


def mode_dependent(arch: Architecture) -> bool:
    """Whether ``arch``'s module behaves differently in train mode (BatchNorm, or random layers): the models the
    arena trained before it honoured train mode differ for these, so caches key them apart (``TRAINING_SEMANTICS``)."""
    template = arch.template()
    return bool(template.random) or bool(batch_norms(template.train_module))


TRAINING_SEMANTICS = 2
"""Bumped when what the engine does with a mode-dependent module changes (2: train mode in training, BatchNorm's
running statistics kept, dropout on the loop engine)."""


def runs_on_loop(arch: Architecture) -> bool:
    """Whether ``arch`` trains on the loop engine: its track asks for it, or (``auto``) ``loop_reason`` says the
    batched engine cannot train it as written."""
    return arch.engine == "loop" or (arch.engine == "auto" and loop_reason(arch) is not None)


def batched_problem(arch: Architecture) -> str | None:
    """Why ``engine: batched`` cannot train ``arch`` (``loop_reason``), or None."""
    reason = loop_reason(arch) if arch.engine == "batched" else None
    return None if reason is None else f"the batched engine cannot train model {arch.model.name!r}: {reason}"


OPACUS_NOTE = ("DP-SGD through Opacus {version} (PrivacyEngine.make_private, {mode}, the arena's Poisson batches, "
               "noise from each model's train seed; the claim is the arena's accountant's)")


def engine_note(arch: Architecture, dp: bool = False) -> str | None:
    """The row note saying which engine trains ``arch`` and why: the loop engine (the track's ``engine: loop``, or
    ``loop_reason``), with how its DP-SGD runs when ``dp`` (Opacus, ``opacus_mode``);
    the batched engine when the track names it; None for ``auto`` on the batched engine (the default)."""
    if arch.engine == "batched":
        return "engine: batched (torch.func, K models at once) because the track asks for it (engine: batched)"
    reason = loop_reason(arch)
    if arch.engine == "auto" and reason is None:
        return None
    why = "the track asks for it (engine: loop)" if arch.engine == "loop" else reason
    note = (f"engine: loop (plain PyTorch, one model at a time, train mode, dropout seeded from each model's train "
            f"seed) because {why}")
    if dp:
        from importlib.metadata import version

        note += "; " + OPACUS_NOTE.format(version=version("opacus"), mode=f'grad_sample_mode="{opacus_mode(arch)}"')
    return note


def opacus_mode(arch: Architecture) -> str:
    """Opacus' ``grad_sample_mode`` for ``arch``: "ghost" (ghost clipping: norms without per-sample gradients for
    the layers it has a norm sampler for, per-sample gradients for the rest) where Opacus has a sampler for every
    layer holding trainable parameters, else "hooks" (its per-sample hooks, functorch for unknown layers)."""
    from opacus.grad_sample import GradSampleModule, GradSampleModuleFastGradientClipping

    known = {**GradSampleModule.GRAD_SAMPLERS, **GradSampleModuleFastGradientClipping.NORM_SAMPLERS}
    layers = [m for m in arch.template().train_module.modules() if any(True for _ in m.parameters(recurse=False))]
    return "ghost" if all(type(m) in known for m in layers) else "hooks"


def _meta_build(arch: Architecture) -> torch.nn.Module:
    """``arch.build()`` on the meta device (nothing allocated), or for real for a model whose construction needs
    real tensors (the plan has checked that its size fits before asking)."""
    try:
        with torch.device("meta"):
            return arch.build()
    except (NotImplementedError, RuntimeError):
        return arch.build()


def batch_norm_layers(arch: Architecture) -> list[str]:
    """The names of the module's BatchNorm layers, which normalise over the batch: that mixes examples and defeats
    per-example clipping."""
    return batch_norms(_meta_build(arch))


def for_per_example_clipping(arch: Architecture) -> Architecture:
    """``arch`` as a defense that clips per-example gradients trains it: with its BatchNorm layers replaced by
    GroupNorm when it has any (``ValueError`` naming those that cannot be), else unchanged."""
    if arch.group_norm or not batch_norm_layers(arch):
        return arch
    fixed = Architecture(arch.model, arch.input_shape, arch.n_classes, group_norm=True, engine=arch.engine)
    _meta_build(fixed)  # raises for a BatchNorm subclass that cannot be replaced
    return fixed


def group_norm_problem(arch: Architecture) -> str | None:
    """Why ``arch`` cannot train under per-example clipping (a BatchNorm layer that GroupNorm cannot replace, or
    a module that fails to build once replaced), or None."""
    try:
        for_per_example_clipping(arch).template()
    except ValueError as exc:
        return str(exc)
    return None


GROUP_NORM_NOTE = ("model: BatchNorm layers replaced by GroupNorm (gcd(32, channels) groups, as Opacus's "
                   "ModuleValidator.fix does) so that per-example gradients can be clipped")
"""The row note of a matchup whose model trained with ``group_norm``."""
