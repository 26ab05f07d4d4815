"""BatchNorm → GroupNorm for per-example clipping: what replaces what (as Opacus's ModuleValidator.fix does), what is
refused, and that the replaced model no longer mixes the examples of a batch, so DP-SGD trains it."""

from __future__ import annotations

import pickle

import pytest
import torch
from torch import nn

from arena.engine.architecture import (
    Architecture,
    batch_norm_layers,
    for_per_example_clipping,
    group_norm_problem,
)
from arena.engine.groupnorm import replace_batch_norm, unfixable
from arena.engine.recipe import DPNoise, Recipe
from arena.engine.trainer import train
from tests.conftest import architecture


class BatchNormAct(nn.BatchNorm2d):
    """A BatchNorm subclass doing more than normalising (as timm's BatchNormAct2d): GroupNorm cannot stand in."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(super().forward(x))


def _net(norm: type[nn.Module] = nn.BatchNorm2d) -> nn.Module:
    """Conv, BatchNorm 2-D with 48 channels (gcd(32, 48) = 16 groups), a nested block, then BatchNorm 1-D."""
    return nn.Sequential(
        nn.Conv2d(1, 48, 3, padding=1), norm(48), nn.ReLU(),
        nn.Sequential(nn.Conv2d(48, 8, 3, padding=1), nn.BatchNorm2d(8, affine=False)),
        nn.Flatten(), nn.Linear(8 * 4 * 4, 6), nn.BatchNorm1d(6), nn.Linear(6, 3))


@pytest.mark.slow  # importing opacus
def test_each_batch_norm_becomes_the_group_norm_opacus_would_put_there():
    """Where Opacus replaces (layers with parameters), the same GroupNorm; a BatchNorm without parameters
    (``affine=False``), which Opacus leaves in place although it still mixes the batch, is replaced too."""
    opacus = pytest.importorskip("opacus")
    ours = dict(replace_batch_norm(_net()).named_modules())
    theirs = dict(opacus.validators.ModuleValidator.fix(_net()).named_modules())
    assert list(ours) == list(theirs)
    replaced = {name: m for name, m in ours.items() if isinstance(m, nn.GroupNorm)}
    assert {name: m.num_groups for name, m in replaced.items()} == {"1": 16, "3.1": 8, "6": 2}  # gcd(32, C)
    for name in ("1", "6"):
        a, b = replaced[name], theirs[name]
        assert isinstance(b, nn.GroupNorm)
        assert (a.num_groups, a.num_channels, a.affine, a.eps) == (b.num_groups, b.num_channels, b.affine, b.eps)
    assert isinstance(theirs["3.1"], nn.BatchNorm2d) and not replaced["3.1"].affine
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in ours.values())


def test_a_batch_norm_subclass_is_named_and_refused():
    assert unfixable(_net(BatchNormAct)) == ["1 (BatchNormAct)"]
    with pytest.raises(ValueError, match=r"cannot be replaced by GroupNorm: 1 \(BatchNormAct\)"):
        replace_batch_norm(_net(BatchNormAct))
    assert unfixable(_net()) == []


def test_a_replaced_model_answers_each_record_as_if_it_were_alone():
    """BatchNorm (batch statistics) makes a record's output depend on the others in its batch; GroupNorm not."""
    torch.manual_seed(0)
    x = torch.rand(5, 1, 4, 4)
    bn, gn = _net().train(), replace_batch_norm(_net()).train()
    assert not torch.allclose(bn(x)[:2], bn(x[:2]), atol=1e-4)
    torch.testing.assert_close(gn(x)[:2], gn(x[:2]))


class _Plugin:
    """A model plugin building ``_net`` (the contract's duck type: name, version, params, build, dense)."""

    name, version = "bn-net", "1"

    def __init__(self, norm: type[nn.Module] = nn.BatchNorm2d) -> None:
        from arena.contracts.model import ModelParams

        self.params, self.norm = ModelParams(), norm

    def build(self, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
        return _net(self.norm)

    def dense(self, input_shape: tuple[int, ...], n_classes: int) -> None:
        return None


@pytest.mark.slow  # the first build loads the plugins
def test_the_architecture_for_per_example_clipping_is_keyed_apart_and_survives_pickling():
    arch = Architecture(_Plugin(), (1, 4, 4), 3)
    assert batch_norm_layers(arch) == ["1", "3.1", "6"]
    fixed = for_per_example_clipping(arch)
    assert fixed.group_norm and not arch.group_norm
    assert fixed.identity() == {**arch.identity(), "group_norm": True}
    assert fixed != arch and pickle.loads(pickle.dumps(fixed)) == fixed
    assert batch_norm_layers(fixed) == [] and group_norm_problem(arch) is None
    plain = architecture("cnn", (1, 8, 8), 10, norm="group")
    assert for_per_example_clipping(plain) is plain  # nothing to replace: the same architecture, the same keys
    refused = Architecture(_Plugin(BatchNormAct), (1, 4, 4), 3)
    assert "1 (BatchNormAct)" in group_norm_problem(refused)


@pytest.mark.slow
@pytest.mark.parametrize("path", ["ghost", "vmap"])
def test_dpsgd_trains_a_batch_norm_model_once_replaced_alone_as_in_a_batch(path):
    """A BatchNorm net, replaced, trains under DP-SGD on either per-example path (ghost norms for the built-in CNN,
    a plain Sequential; ``vmap(grad)`` for the nested net), and model k's result is the same trained alone or
    beside another (its own seeds alone decide it)."""
    if path == "ghost":
        arch = for_per_example_clipping(architecture("cnn", (1, 4, 4), 3, channels=[4], hidden=0, norm="batch"))
    else:
        arch = for_per_example_clipping(Architecture(_Plugin(), (1, 4, 4), 3))
    assert (arch.template().ghost is not None) == (path == "ghost")
    g = torch.Generator().manual_seed(0)
    X, y = torch.rand(2, 40, 16, generator=g), torch.randint(0, 3, (2, 40), generator=g)
    recipe, dp = Recipe(epochs=2, lr=0.1, batch_size=10), DPNoise(clip=1.0, noise_multiplier=1.0)
    init, seeds = torch.tensor([1, 2]), torch.tensor([3, 4])
    both = train(arch, X, y, recipe, init, seeds, dp=dp)
    alone = train(arch, X[1:], y[1:], recipe, init[1:], seeds[1:], dp=dp)
    assert all(torch.isfinite(v).all() for v in both.values())
    for name, value in alone.items():
        torch.testing.assert_close(both[name][1:], value, atol=1e-5, rtol=1e-4)
