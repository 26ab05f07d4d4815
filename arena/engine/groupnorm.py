"""BatchNorm → GroupNorm, for training under per-example clipping: BatchNorm mixes the examples of a batch, so a
clipped per-example gradient would not bound one record's influence; GroupNorm normalises each example alone.

The replacement is Opacus's ``ModuleValidator.fix`` default (``GroupNorm(gcd(32, C), C, affine=...)`` for exactly
``BatchNorm1d/2d/3d`` and ``SyncBatchNorm``); a subclass of BatchNorm (timm's ``BatchNormAct2d`` also applies an
activation) cannot be replaced without changing what its ``forward`` does, so it is named as unfixable instead.
"""

from __future__ import annotations

import math

from torch import nn

GROUPS = 32
"""Groups of the replacement, at most: Wu & He's (2018) default, as Opacus uses (gcd with the channel count)."""

REPLACEABLE: tuple[type[nn.Module], ...] = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)


def batch_norms(module: nn.Module) -> list[str]:
    """The names of ``module``'s BatchNorm layers (any subclass of torch's ``_BatchNorm``), in module order."""
    return [name for name, m in module.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def unfixable(module: nn.Module) -> list[str]:
    """'name (Class)' for each BatchNorm layer that is not exactly one of ``REPLACEABLE``."""
    return [f"{name or '<root>'} ({type(m).__name__})" for name, m in module.named_modules()
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and type(m) not in REPLACEABLE]


def group_norm_for(bn: nn.modules.batchnorm._BatchNorm) -> nn.GroupNorm:
    """The GroupNorm that replaces ``bn``: gcd(32, C) groups over its C channels, affine when it was."""
    c = bn.num_features
    return nn.GroupNorm(math.gcd(GROUPS, c), c, eps=bn.eps, affine=bn.affine)


def replace_batch_norm(module: nn.Module) -> nn.Module:
    """``module`` with every replaceable BatchNorm layer swapped for ``group_norm_for`` it, in place (the module
    itself is returned, or its replacement when it is a BatchNorm); ``ValueError`` naming any that cannot be."""
    bad = unfixable(module)
    if bad:
        raise ValueError(f"BatchNorm layers that cannot be replaced by GroupNorm: {', '.join(bad)}")
    if type(module) in REPLACEABLE:
        return group_norm_for(module)  # type: ignore[arg-type]  # REPLACEABLE are _BatchNorm classes
    for parent in list(module.modules()):
        for child_name, child in list(parent.named_children()):
            if type(child) in REPLACEABLE:
                setattr(parent, child_name, group_norm_for(child))  # type: ignore[arg-type]  # as above
    return module
