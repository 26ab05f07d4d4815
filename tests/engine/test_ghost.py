"""Ghost clipping (arena/engine/ghost.py): chosen exactly for stacks of layers it supports, and the same clipped
sums (hence the same DP-SGD training) as per-example gradients from ``vmap(grad)``, to float tolerance."""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from arena.engine import dense_kernel, functional, ghost, ghost_plan
from arena.engine import trainer as trainer_module
from arena.engine.architecture import Architecture
from arena.engine.ensemble import init_state
from arena.engine.functional import clipped_sum, examples_per_call
from arena.engine.recipe import DPNoise, Recipe
from arena.engine.trainer import train
from plugins.models import StandardizedConv2d
from tests.conftest import architecture

SHAPE, CLASSES, K, B = (1, 8, 8), 4, 3, 10
CNNS = {
    "cnn": {"channels": [4, 8], "hidden": 16},
    "cnn-group": {"channels": [4, 8], "hidden": 16, "norm": "group", "groups": 2},
    "cnn-wide": {"channels": [16, 32], "hidden": 0, "activation": "tanh"},  # second conv ghost-normed
}
TOL = {"rtol": 1e-9, "atol": 1e-12}


def _cnn(name: str) -> Architecture:
    return architecture("cnn", SHAPE, CLASSES, **CNNS[name])


def _stack(arch: Architecture) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """K models' parameters (float64) and a batch of K·B images with labels."""
    state = init_state(arch, torch.arange(K), torch.float64)
    g = torch.Generator().manual_seed(1)
    X = torch.rand(K, B, *arch.input_shape, generator=g, dtype=torch.float64)
    y = torch.randint(0, arch.n_classes, (K, B), generator=g)
    return {n: state[n] for n in arch.template().trainable}, X, y


def _norms(module: nn.Module, params: dict[str, torch.Tensor], X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """[K, B] per-example gradient norms by plain torch.func, one model at a time."""

    def loss(w, x, t):
        return nn.functional.cross_entropy(functional_call(module, w, (x[None],)), t[None])

    out = []
    for k in range(X.shape[0]):
        g = vmap(grad(loss), in_dims=(None, 0, 0))({n: p[k] for n, p in params.items()}, X[k], y[k])
        out.append(torch.cat([t.reshape(X.shape[1], -1) for t in g.values()], dim=1).norm(dim=1))
    return torch.stack(out)


def test_the_plan_is_chosen_for_plain_stacks_only():
    for name in CNNS:
        plan = _cnn(name).template().ghost
        assert plan is not None
        kinds = [layer.kind for layer in plan.layers]
        assert kinds.count("conv") == 2 and kinds.count("linear") == (2 if CNNS[name]["hidden"] else 1)
        assert kinds.count("group_norm") == (2 if name == "cnn-group" else 0)
    # the built-in models the ghost path cannot take keep vmap(grad)
    assert architecture("wrn", (3, 32, 32), 10, depth=10, width=1).template().ghost is None  # residual blocks
    assert architecture("mlp", 64, 10, hidden=[8]).template().ghost is None  # a custom module, not a Sequential
    assert architecture("cnn", SHAPE, CLASSES, channels=[4], norm="batch").template().ghost is None
    shape = (2, 6, 6)
    plain = [nn.Conv2d(2, 3, 3), nn.ReLU(), nn.Flatten(), nn.Linear(48, 4)]
    assert ghost_plan.plan(nn.Sequential(*plain), shape) is not None
    assert ghost_plan.plan(nn.Sequential(nn.Sequential(*plain[:2]), nn.Sequential(*plain[2:])), shape) is not None
    unsupported = {
        "grouped conv": [nn.Conv2d(2, 4, 3, groups=2), nn.Flatten(), nn.Linear(64, 4)],
        "reflect padding": [nn.Conv2d(2, 3, 3, padding=1, padding_mode="reflect"), nn.Flatten(), nn.Linear(108, 4)],
        "conv subclass": [StandardizedConv2d(2, 3, 3), nn.Flatten(), nn.Linear(48, 4)],
        "softmax over the batch": [nn.Flatten(), nn.Softmax(dim=0), nn.Linear(72, 4)],
        "flatten of the batch": [nn.Flatten(0), nn.Linear(72, 4)],
        "batch norm": [nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3), nn.Flatten(), nn.Linear(48, 4)],
        "dropout in training": [nn.Flatten(), nn.Dropout(0.5), nn.Linear(72, 4)],
    }
    for why, layers in unsupported.items():
        module = nn.Sequential(*layers)
        if why != "dropout in training":
            module.eval()
        assert ghost_plan.plan(module, shape) is None, why

    class Residual(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(*plain)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x)

    assert ghost_plan.plan(Residual(), shape) is None  # any container that is not a Sequential: its forward is unknown
    with pytest.raises(ValueError, match="ghost clipping"):
        arch = architecture("mlp", 64, 10, hidden=[8])
        clipped_sum(arch, *_stack(arch)[:1], {}, torch.zeros(K, B, 64), torch.zeros(K, B, dtype=torch.int64),
                    None, 1.0, B, method="ghost")


@pytest.mark.slow
@pytest.mark.parametrize("masked", [False, True], ids=["all-valid", "padded"])
@pytest.mark.parametrize("name", list(CNNS))
def test_ghost_clipped_sums_equal_per_example_gradients(name, masked):
    """Clip below every norm, at each model's median norm (some examples clipped, some not) and above every norm;
    padding rows masked out; examples in one pass or several."""
    arch = _cnn(name)
    params, X, y = _stack(arch)
    valid = torch.rand(K, B, generator=torch.Generator().manual_seed(2)) > 0.3 if masked else None
    norms = _norms(arch.template().module.double(), params, X, y)
    median = float(norms.median())
    assert (norms > median).any() and (norms < median).any()
    for clip in (0.5 * float(norms.min()), median, 2.0 * float(norms.max())):
        reference = clipped_sum(arch, params, {}, X, y, valid, clip, B, method="vmap")
        for per_call in (B, 3):
            ours = clipped_sum(arch, params, {}, X, y, valid, clip, per_call, method="ghost")
            assert list(ours) == list(reference)
            for n in reference:
                torch.testing.assert_close(ours[n], reference[n], **TOL, msg=f"{n} at clip {clip}")
    if masked:  # a masked row contributes nothing: dropping it changes nothing
        k, b = map(int, torch.nonzero(~valid)[0])
        keep = [i for i in range(B) if i != b]
        one = {n: p[k : k + 1] for n, p in params.items()}
        full = clipped_sum(arch, one, {}, X[k : k + 1], y[k : k + 1], valid[k : k + 1], median, B)
        fewer = clipped_sum(arch, one, {}, X[k : k + 1, keep], y[k : k + 1, keep], valid[k : k + 1, keep], median, B)
        for n in full:
            torch.testing.assert_close(full[n], fewer[n], **TOL)


ODD_STACKS = {
    # strides, dilation, asymmetric padding and kernels, a bias-free conv, GroupNorm, nested Sequentials
    "strided": (
        lambda: nn.Sequential(
            nn.Conv2d(2, 5, 3, stride=2, padding=2, dilation=2), nn.GroupNorm(5, 5), nn.Tanh(),
            nn.Sequential(nn.Conv2d(5, 3, (2, 3), stride=(1, 2), padding=(0, 1), bias=False), nn.ELU()),
            nn.AvgPool2d(2), nn.Flatten(), nn.Linear(6, 4),
        ),
        (2, 9, 11),
    ),
    # linear layers over a sequence (L > 1), GroupNorm on [C, L], dropout (eval) and identity
    "sequence": (
        lambda: nn.Sequential(
            nn.Linear(6, 7), nn.GELU(), nn.GroupNorm(1, 5), nn.Linear(7, 3), nn.Flatten(), nn.Dropout(0.5),
            nn.Identity(), nn.Linear(15, 4),
        ),
        (5, 6),
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("flip", [False, True], ids=["mixed-rule", "other-choice"])
@pytest.mark.parametrize("name", list(ODD_STACKS))
def test_both_norm_strategies_on_odd_layers_equal_per_example_gradients(name, flip):
    """Ghost norms and formed per-example gradients, each layer both ways (the mixed rule's choice and the other)."""
    build, shape = ODD_STACKS[name]
    torch.manual_seed(0)
    module = build().double().eval()
    plan = ghost_plan.plan(module, shape)
    assert plan is not None
    plan = ghost_plan.Plan(tuple(dataclasses.replace(layer, materialise=layer.materialise ^ flip)
                            for layer in plan.layers), plan.elements_per_example)
    params = {n: torch.stack([p.detach() + 0.1 * torch.randn_like(p) for _ in range(K)])
              for n, p in module.named_parameters()}
    X, y = torch.randn(K, B, *shape, dtype=torch.float64), torch.randint(0, 4, (K, B))
    valid = torch.rand(K, B) > 0.3
    norms = _norms(module, params, X, y)

    def loss(w, x, t):
        return nn.functional.cross_entropy(functional_call(module, w, (x[None],)), t[None])

    # each model's per-example gradients of every parameter, formed once (they depend on neither clip nor name)
    per_example = [vmap(grad(loss), in_dims=(None, 0, 0))({m: q[k] for m, q in params.items()}, X[k], y[k])
                   for k in range(K)]
    for clip in (0.5 * float(norms.min()), float(norms.median()), 2.0 * float(norms.max())):
        ours = ghost.clipped_sum(plan, params, X, y, valid, clip, 4)
        factor = (clip / norms).clamp(max=1.0) * valid
        for n in params:
            for k in range(K):
                g = per_example[k][n]
                torch.testing.assert_close(ours[n][k], torch.einsum("b,b...->...", factor[k], g), **TOL, msg=n)


@pytest.mark.skipif(dense_kernel.library() is None, reason="kernels off or not built")
@pytest.mark.parametrize("name", ["cnn", "sequence"])
def test_the_dense_tail_through_the_kernel_gives_the_eager_float32_sums(name, monkeypatch):
    """The linear layers of one position (a CNN's head; a sequence stack's last layer after others over positions)
    take the dense kernel, fed the other layers' norms: in float32 the same clipped sums as without the kernel, for
    models second in memory (K = 3) or alone, padding rows masked, examples in one pass or several."""
    if name == "cnn":
        module, shape = _cnn("cnn").template().module, SHAPE
    else:
        module, shape = ODD_STACKS[name][0]().eval(), ODD_STACKS[name][1]
    plan = ghost_plan.plan(module, shape)
    assert plan is not None
    g = torch.Generator().manual_seed(4)
    params = {n: torch.stack([p.detach().float() + 0.1 * torch.randn(p.shape, generator=g) for _ in range(K)])
              for n, p in module.named_parameters()}  # float32 whatever another test made of the shared module
    X, y = torch.randn(K, B, *shape, generator=g), torch.randint(0, 4, (K, B), generator=g)
    valid = torch.rand(K, B, generator=g) > 0.3
    calls: list[bool] = []
    clipped = dense_kernel.clipped
    monkeypatch.setattr(dense_kernel, "clipped", lambda *a, **kw: calls.append(True) or clipped(*a, **kw))
    for clip in (0.01, 1.0):  # most examples clipped; some
        for per_call, mask in ((B, valid), (3, None)):
            ours = ghost.clipped_sum(plan, params, X, y, mask, clip, per_call, scale=0.25)
            alone = ghost.clipped_sum(plan, {n: p[1:2] for n, p in params.items()}, X[1:2], y[1:2],
                                      None if mask is None else mask[1:2], clip, per_call, scale=0.25)
            with monkeypatch.context() as m:
                m.setattr(dense_kernel, "library", lambda: None)
                eager = ghost.clipped_sum(plan, params, X, y, mask, clip, per_call, scale=0.25)
            for n in params:
                assert ours[n].shape == params[n].shape and ours[n].is_contiguous()
                torch.testing.assert_close(ours[n], eager[n], rtol=1e-5, atol=1e-6, msg=n)
                torch.testing.assert_close(alone[n], eager[n][1:2], rtol=1e-5, atol=1e-6, msg=n)
    assert calls  # the kernel took the tail


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cnn", "cnn-group"])
def test_dp_sgd_with_ghost_clipping_trains_as_with_vmap_grad_alone_or_batched(name, monkeypatch):
    """Through ``train``: ghost clipping (the default for the CNN) gives the models ``vmap(grad)`` gives, and each
    model trains the same alone as inside the batch."""
    arch = _cnn(name)
    recipe, dp = Recipe(epochs=2, lr=0.1, momentum=0.9, batch_size=6), DPNoise(clip=0.3, noise_multiplier=0.7)
    g = torch.Generator().manual_seed(3)
    X, y = torch.rand(K, 16, 64, generator=g, dtype=torch.float64), torch.randint(0, CLASSES, (K, 16), generator=g)
    init, seeds = torch.tensor([1, 2, 3]), torch.tensor([7, 8, 9])
    batched = train(arch, X, y, recipe, init, seeds, dp, engine="functional")
    for k in range(K):
        alone = train(arch, X[k : k + 1], y[k : k + 1], recipe, init[k : k + 1], seeds[k : k + 1], dp,
                      engine="functional")
        for n in alone:
            torch.testing.assert_close(batched[n][k : k + 1], alone[n], **TOL, msg=n)
    monkeypatch.setattr(trainer_module, "clipped_sum", functools.partial(functional.clipped_sum, method="vmap"))
    reference = train(arch, X, y, recipe, init, seeds, dp, engine="functional")
    start = init_state(arch, init, torch.float64)
    for n in reference:
        torch.testing.assert_close(batched[n], reference[n], **TOL, msg=n)
        assert not torch.allclose(batched[n], start[n])


def test_examples_per_call_follows_the_budget():
    arch = _cnn("cnn")
    plan = arch.template().ghost
    per_example = 8 * plan.elements_per_example  # float64, one model
    assert examples_per_call(arch, 1, 10 * per_example, torch.float64) == 10
    assert examples_per_call(arch, 5, 10 * per_example, torch.float64) == 2
    assert examples_per_call(arch, 1, 1, torch.float64) == 1
    assert examples_per_call(arch, 1, 10 * per_example, torch.float32) == 20
    mlp = architecture("mlp", 64, 10, hidden=[8])  # vmap(grad): a full gradient per example, 8 bytes a parameter
    assert examples_per_call(mlp, 2, 16 * 10 * mlp.template().n_params) == 10
