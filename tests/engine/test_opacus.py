"""The arena's DP-SGD step on a CNN against Opacus: same initial weights, same batch, noise switched off.

Opacus (``GradSampleModule`` + ``DPOptimizer``, flat clipping over all parameters, its default) clips each
example's gradient to norm C, sums, and divides by the expected batch size; the arena's
``arena.engine.functional.clipped_sum`` divided by that size must be the same averaged clipped gradient, and one
full-batch DP-SGD step of ``train`` the same update.
"""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call, grad, vmap

from arena.engine.architecture import Architecture
from arena.engine.ensemble import init_state
from arena.engine.functional import clipped_sum
from arena.engine.recipe import DPNoise, Recipe
from arena.engine.trainer import train
from tests.conftest import architecture

opacus = pytest.importorskip("opacus")
pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning"), pytest.mark.slow]

SHAPE, CLASSES, K, B = (1, 8, 8), 4, 3, 10
TOL = {"rtol": 1e-5, "atol": 1e-5}


def _arch(norm: str) -> Architecture:
    return architecture("cnn", SHAPE, CLASSES, channels=[4, 8], hidden=16, norm=norm, groups=2)


def _batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(K, B, *SHAPE, generator=g), torch.randint(0, CLASSES, (K, B), generator=g)


def _module(arch: Architecture, state: dict[str, torch.Tensor], k: int) -> torch.nn.Module:
    """Model k of the stack as an ordinary module, for Opacus."""
    net = arch.build()
    net.load_state_dict({n: t[k].clone() for n, t in state.items()})
    return net


def _per_example_norms(net: torch.nn.Module, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Norms of each example's full gradient, by plain torch.func (independent of both implementations)."""
    weights = {n: p.detach() for n, p in net.named_parameters()}

    def loss(w, x, t):
        return torch.nn.functional.cross_entropy(functional_call(net, w, (x[None],)), t[None])

    g = vmap(grad(loss), in_dims=(None, 0, 0))(weights, X, y)
    return torch.cat([t.reshape(len(X), -1) for t in g.values()], dim=1).norm(dim=1)


def _opacus(net: torch.nn.Module, clip: float, lr: float) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    model = GradSampleModule(net)
    opt = DPOptimizer(torch.optim.SGD(model.parameters(), lr=lr), noise_multiplier=0.0, max_grad_norm=clip,
                      expected_batch_size=B)
    return model, opt


@pytest.mark.parametrize("norm", ["none", "group"])
def test_clipped_gradient_matches_opacus(norm):
    arch = _arch(norm)
    state = init_state(arch, torch.tensor([1, 2, 3]))
    X, y = _batch()
    template = arch.template()
    params = {n: state[n] for n in template.trainable}
    clips = [float(_per_example_norms(_module(arch, state, k), X[k], y[k]).median()) for k in range(K)]
    for k in range(K):
        norms = _per_example_norms(_module(arch, state, k), X[k], y[k])
        assert (norms > clips[k]).any() and (norms < clips[k]).any()  # clipping binds for some examples only

    for k in range(K):
        ours = clipped_sum(arch, {n: p[k : k + 1] for n, p in params.items()}, {}, X[k : k + 1], y[k : k + 1],
                           None, clips[k], examples_per_call=3)
        net = _module(arch, state, k)
        model, opt = _opacus(net, clips[k], lr=1.0)
        torch.nn.functional.cross_entropy(model(X[k]), y[k]).backward()
        opt.pre_step()
        theirs = dict(net.named_parameters())
        assert list(theirs) == list(template.trainable)
        for name in template.trainable:
            torch.testing.assert_close(ours[name][0] / B, theirs[name].grad, **TOL, msg=name)


def test_one_full_batch_dp_sgd_step_matches_opacus():
    """``train`` with q = 1 (full batch: expected batch size n), σ = 0, one step, lr 0.5: Opacus's SGD step."""
    arch, lr = _arch("none"), 0.5
    X, y = _batch(seed=1)
    init = torch.tensor([4, 5, 6])
    state = init_state(arch, init)
    clips = [float(_per_example_norms(_module(arch, state, k), X[k], y[k]).median()) for k in range(K)]
    for k in range(K):
        seed = init[k : k + 1]
        ours = train(arch, X[k : k + 1].reshape(1, B, -1), y[k : k + 1], Recipe(epochs=1, lr=lr), seed, seed,
                     DPNoise(clip=clips[k], noise_multiplier=0.0), engine="functional")
        net = _module(arch, state, k)
        model, opt = _opacus(net, clips[k], lr=lr)
        torch.nn.functional.cross_entropy(model(X[k]), y[k]).backward()
        opt.step()
        for name, p in net.named_parameters():
            torch.testing.assert_close(ours[name][0], p.detach(), **TOL, msg=name)
            assert not torch.equal(p.detach(), state[name][k])  # the step moved every parameter
