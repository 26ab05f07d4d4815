"""K copies of one module as stacked tensors (PyTorch's model-ensembling recipe): seeded initialisation, the
batched forward pass, and an ``nn.Module`` view of the stack for defenses written with ordinary autograd."""

from __future__ import annotations

import torch
from torch.func import functional_call, vmap

from arena.contracts.architecture import ModelStack
from arena.engine.architecture import Architecture, State, loop_reason
from arena.engine.seeds import module_seed, seeded

ROWS_PER_CALL = 8192
"""Records per forward call when scoring, so that a large query set never holds all activations at once."""


def init_state(
    arch: Architecture,
    seeds: torch.Tensor,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> State:
    """K freshly initialised models, model k built under ``torch.manual_seed(seeds[k])`` alone (the module's own
    initialisation, whatever it is), so a model starts the same alone or inside any batch."""
    modules = []
    cpu = torch.get_default_device().type == "cpu"
    for seed in seeds.tolist():
        with torch.random.fork_rng(devices=[]):
            if cpu:  # the generator a CPU module's initialisation draws from (torch.manual_seed also queues
                torch.default_generator.manual_seed(int(seed) % 2**64)  # seeds for every accelerator: ~3x slower)
            else:
                torch.manual_seed(int(seed) % 2**64)
            modules.append(arch.build())
    with torch.no_grad():
        tensors = [{**dict(m.named_parameters()), **dict(m.named_buffers())} for m in modules]
        state = {k: torch.stack([t[k] for t in tensors]) for k in tensors[0]}
    return {k: (v.to(device, dtype) if v.is_floating_point() else v.to(device)) for k, v in state.items()}


def _images(arch: Architecture, X: torch.Tensor) -> torch.Tensor:
    """Flat records [..., d] as [..., *input_shape]."""
    return X.reshape(*X.shape[:-1], *arch.input_shape)


def logits(arch: Architecture, state: State, X: torch.Tensor) -> torch.Tensor:
    """Logits [K, n, C] of each model for X [n, d] (shared by all models) or [K, n, d] (one set per model)."""
    module = arch.template().module
    X = X.to(next(iter(state.values())).device)
    shared = X.ndim == 2

    def one(s: State, x: torch.Tensor) -> torch.Tensor:
        return functional_call(module, s, (x,))

    batched = vmap(one, in_dims=(0, None if shared else 0))
    chunks = []
    with torch.no_grad():
        for start in range(0, X.shape[-2], ROWS_PER_CALL):
            part = X[..., start : start + ROWS_PER_CALL, :]
            chunks.append(batched(state, _images(arch, part)))
    return torch.cat(chunks, dim=1)


class Ensemble(ModelStack):
    """K models as one ``nn.Module`` whose parameters are the stacked tensors: ``forward`` maps [K, B, d] (or
    [K, B, *input_shape]) to logits [K, B, C]. Summing the K per-model losses and calling ``backward`` gives each
    model its own gradient, so ``torch.optim`` trains the K models independently and at once.

    Like any module it is in train mode until ``eval()``: the models run in train mode then (BatchNorm on batch
    statistics, updating each model's running statistics in its buffers; dropout on), in eval mode after. A module
    that draws random numbers in training (``Template.random``) runs one model at a time in train mode, model k
    drawing from torch's generator seeded by ``seeds.module_seed`` of its train seed ``seeds[k]`` and the call, so
    its draws do not depend on the other models; without ``seeds`` that is refused."""

    def __init__(self, arch: Architecture, state: State, seeds: torch.Tensor | None = None) -> None:
        super().__init__()
        self.arch = arch
        template = arch.template()
        self._names = list(state)
        self._trainable = set(template.trainable)
        self.stack = torch.nn.ParameterList(
            [torch.nn.Parameter(state[n].clone(), requires_grad=n in self._trainable) for n in self._names]
        )
        self._seeds = None if seeds is None else [int(s) for s in seeds]
        self._calls = 0
        """Forward calls in train mode so far: call t of model k draws from ``module_seed(seeds[k], t)``."""

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        if X.shape[2:] != self.arch.input_shape:
            X = _images(self.arch, X)
        template = self.arch.template()
        if not self.training:
            return vmap(lambda s, x: functional_call(template.module, s, (x,)))(self.state(), X)
        if not template.random:
            return vmap(lambda s, x: functional_call(template.train_module, s, (x,)))(self.state(), X)
        if self._seeds is None:
            raise ValueError(f"an Ensemble of model {self.arch.model.name!r} needs its train seeds to run in train "
                             f"mode (Ensemble(arch, state, seeds)), because {loop_reason(self.arch)}")
        outputs = []
        state = self.state()
        for k, seed in enumerate(self._seeds):
            with seeded(module_seed(seed, self._calls), X.device):
                outputs.append(functional_call(template.train_module, {n: t[k] for n, t in state.items()}, (X[k],)))
        self._calls += 1
        return torch.stack(outputs)

    def state(self) -> State:
        """The stacked tensors by module name (live: they are this ensemble's parameters)."""
        return dict(zip(self._names, self.stack))

    def penalised(self) -> list[torch.nn.Parameter]:
        """The weight tensors an L2 penalty covers (those of two or more dimensions per model)."""
        return [p for n, p in zip(self._names, self.stack) if n in self.arch.template().penalised]

    def detached(self) -> State:
        return {n: p.detach().clone() for n, p in zip(self._names, self.stack)}
