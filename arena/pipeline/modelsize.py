"""A model's size for training, counted before anything that size is allocated (the plan's memory check).

Validation refuses a model whose training would need more memory than the machine has: ``model_bytes`` counts its
parameters and buffers on PyTorch's ``meta`` device, or, for a model that needs real tensors to build, builds it
under ``AllocationGuard``, which stops it (``TooLarge``) before it allocates more than the limit.
"""

from __future__ import annotations

import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from arena.engine.architecture import Architecture

TRAINING_MEMORY_FACTOR = 4
"""Bytes of training memory per byte of a model's tensors: the weights, their gradients, the optimiser's momentum
and the per-example work (activations, clipped gradients), counted conservatively low."""


class TooLarge(Exception):  # noqa: N818 - a signal inside the guard, caught by the plan
    """A model build asked for more real memory than its track could ever train with."""


class AllocationGuard(TorchDispatchMode):
    """Refuses, before it happens, any allocation by a factory op (``empty``, ``zeros``, ``randn``, ``new_empty``,
    ...) that would take the real (not ``meta``) memory allocated under it past ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit, self.total = limit, 0

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """False: torch would otherwise wrap ``__torch_dispatch__`` in ``torch._dynamo.disable``, importing Dynamo
        (about 1.5 s of CPU in every arena process) for a mode that never runs compiled code."""
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        size = _factory_bytes(func, args, kwargs)
        if size:
            self.total += size
            if self.total > self.limit:
                raise TooLarge(self.total)
        return func(*args, **kwargs)


def _factory_bytes(func, args, kwargs) -> int:  # noqa: ANN001
    """Bytes of real memory a factory op is about to allocate; 0 for other ops and for ``meta`` tensors."""
    schema = func._schema
    name = schema.name.split("::")[-1]
    tensors = [a for a in schema.arguments if a.type.kind() == "TensorType"]
    if tensors and not name.startswith("new_"):
        return 0  # computes from tensors it is given (a view, an in-place initialiser): bounded by them
    values = {a.name: (args[i] if i < len(args) else kwargs.get(a.name, a.default_value if a.has_default_value()
                                                                     else None))
              for i, a in enumerate(schema.arguments)}
    size = values.get("size")
    if not isinstance(size, (list, tuple)):
        return 0
    device = values.get("device")
    if device is None and tensors:
        device = getattr(args[0], "device", None)
    if device is not None and torch.device(device).type == "meta":
        return 0
    dtype = values.get("dtype")
    if dtype is None:
        dtype = getattr(args[0], "dtype", None) if tensors else torch.get_default_dtype()
    itemsize = dtype.itemsize if isinstance(dtype, torch.dtype) else 8
    return math.prod(int(s) for s in size) * itemsize


def model_bytes(arch: Architecture, limit: int) -> int:
    """Bytes of the model's parameters and buffers, counted without allocating them: built on the ``meta`` device,
    or, for a model whose construction needs real tensors, built for real under a guard that stops it before it
    allocates more than ``limit`` bytes (``TooLarge``)."""
    try:
        with AllocationGuard(limit), torch.device("meta"):
            module = arch.build()
    except TooLarge:
        raise
    except Exception:  # noqa: BLE001 - e.g. .item() on a meta tensor: count a real build, but within the limit
        with AllocationGuard(limit):
            module = arch.build()
    tensors = [*module.parameters(), *module.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)
