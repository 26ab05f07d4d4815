"""Geiping et al.'s ``breaching`` (github.com/JonasGeiping/breaching) driven on a shared gradient the arena made: its
attacker classes called directly on a hand-built server payload and shared data, as its own ``cases`` would hand
them over, with its own attack configurations (hydra) and only the budget (iterations, restarts) overridden.

``breaching`` is a peer, never a dependency: it is not installed by any extra (it imports torchvision, which must
match torch's build). ``unavailable()`` says why it cannot run here, so that the pair reports that and moves on.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from typing import Any

import numpy as np
import torch
from torch import nn

ATTACKS = {
    "inverting-gradients": ("invertinggradients", []),
    "dlg": ("deepleakage", []),
    "idlg": ("deepleakage", ["attack_type=optimization", "label_strategy=iDLG"]),
    "analytic-first-layer": ("analytic", []),
}
"""The arena's attack → breaching's attack configuration and what is overridden besides the budget. breaching has
no iDLG file: iDLG is its DLG configuration (L-BFGS, Euclidean distance) with the labels recovered first by its
``iDLG`` label strategy instead of optimised jointly."""
LBFGS_INNER = 20
"""torch's LBFGS default ``max_iter``: every outer step of breaching's L-BFGS attacks runs up to 20 iterations."""


def unavailable() -> str | None:
    """None when breaching imports here; otherwise the reason (the import's error, as raised)."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            import breaching  # noqa: F401 - only whether it imports
    except Exception as e:  # noqa: BLE001 - torchvision fails in several ways beside ImportError
        return f"{type(e).__name__}: {e}".splitlines()[0][:300]
    return None


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as v

    try:
        return v("breaching")
    except PackageNotFoundError:
        return "from source (not pip-installed)"


def sequential(module: nn.Module) -> nn.Module:
    """The arena's dense network (``layers`` of ``nn.Linear`` with ``act`` between) as the ``nn.Sequential`` with a
    leading ``Flatten`` that breaching's analytic attack walks; same parameters in the same order. Other modules are
    returned as they are."""
    layers, act = getattr(module, "layers", None), getattr(module, "act", None)
    if not isinstance(layers, nn.ModuleList) or act is None:
        return module
    parts: list[nn.Module] = [nn.Flatten()]
    for i, layer in enumerate(layers):
        parts += [layer] if i == len(layers) - 1 else [layer, act]
    return nn.Sequential(*parts)


def config(attack: str, iterations: int, restarts: int) -> Any:
    """breaching's configuration of ``attack`` (an arena attack's name, ``ATTACKS``) with the budget overridden:
    Inverting Gradients ``iterations`` Adam steps; DLG and iDLG ``iterations``/20 outer L-BFGS steps of up to 20
    iterations each (``iterations`` L-BFGS iterations in all, what the arena's ``iterations`` counts); ``restarts``
    trials each. Composed once, outside any timing (hydra's compose takes about 0.1 s)."""
    import breaching

    name, extra = ATTACKS[attack]
    overrides = list(extra)
    if attack in ("dlg", "idlg"):
        overrides += [f"optim.max_iterations={max(1, iterations // LBFGS_INNER)}", f"restarts.num_trials={restarts}"]
    elif attack == "inverting-gradients":
        overrides += [f"optim.max_iterations={iterations}", f"restarts.num_trials={restarts}"]
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # hydra's notice about breaching's version_base="1.1"
        return breaching.get_attack_config(name, overrides=overrides)


def reconstruct(cfg: Any, attack: str, module: nn.Module, gradients: list[torch.Tensor], n_records: int,
                shape: tuple[int, ...], n_classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """breaching's ``attack`` configured by ``cfg`` (``config``) on the mean gradient ``gradients`` (in
    ``module.parameters()`` order) of ``n_records`` records of ``shape`` in [0, 1]: (records [n_records,
    prod(shape)], labels [n_records]). Labels are not given (the game's ``labels: hidden``)."""
    from breaching.attacks import prepare_attack
    from omegaconf import OmegaConf

    logging.getLogger("breaching").setLevel(logging.WARNING)
    model = sequential(module) if attack == "analytic-first-layer" else module
    loss = nn.CrossEntropyLoss()
    setup = {"dtype": torch.float, "device": torch.device("cpu")}
    metadata = OmegaConf.create({"shape": list(shape), "modality": "vision", "task": "classification",
                                 "classes": n_classes})  # no mean/std: data in [0, 1], boxed there
    payload = [{"parameters": [p.detach() for p in model.parameters()], "buffers": None, "metadata": metadata}]
    shared = [{"gradients": [g.detach().clone() for g in gradients], "buffers": None,
               "metadata": {"num_data_points": n_records, "labels": None, "local_hyperparams": None}}]
    with contextlib.redirect_stdout(io.StringIO()):
        attacker = prepare_attack(model, loss, cfg, setup)
    for reg in getattr(attacker, "regularizers", []):
        if type(reg).__name__ == "TotalVariation" and shape[0] != 3 and not reg.double_opponents:
            reg.groups = shape[0]  # its filters are built for 3 channels; the same two per channel for grey images
            reg.weight = reg.weight[: 2 * shape[0]]
    torch.manual_seed(seed % (1 << 63))
    with contextlib.redirect_stdout(io.StringIO()):
        out, _ = attacker.reconstruct(payload, shared, {}, dryrun=False)
    labels = out["labels"]
    labels = labels.argmax(-1) if labels.ndim > 1 else labels
    records = out["data"].detach().reshape(n_records, -1).clamp(0.0, 1.0)
    return records.double().numpy(), labels.detach().reshape(-1).numpy()
