"""DP-SGD pieces: ghost norms, clipped sums and the noisy update against independent references."""

import math

import pytest
import torch
from torch.func import functional_call, grad, vmap

from arena.engine import rng
from arena.engine.dense import (
    Dense,
    backprop,
    layer_inputs,
    output_delta,
    to_layers,
    unflatten_module_order,
)
from arena.engine.dpsgd import clipped_noisy_gradient, clipped_sum, noisy_gradient, per_example_grad_norms
from arena.engine.ensemble import init_state
from arena.engine.recipe import DPNoise, Recipe
from arena.engine.trainer import train
from tests.conftest import architecture

MODEL = architecture("mlp", 6, 4, hidden=[5, 3], activation="relu")
ARCH: Dense = MODEL.dense
K, B = 3, 8


def _init_layers(arch, seeds: torch.Tensor, dtype: torch.dtype) -> list[torch.Tensor]:
    """The engine's seeded initialisation of K models, as dense layers."""
    return to_layers(init_state(arch, seeds, dtype))


def _net(params, k: int) -> torch.nn.Sequential:
    """Model k as a torch module (Linear weight is W transposed)."""
    lins = [torch.nn.Linear(*W.shape[1:], dtype=W.dtype) for W in params[0::2]]
    for lin, W, b in zip(lins, params[0::2], params[1::2]):
        lin.weight.data, lin.bias.data = W[k].T.clone(), b[k].clone()
    return torch.nn.Sequential(lins[0], torch.nn.ReLU(), lins[1], torch.nn.ReLU(), lins[2])


def _per_example_grads(net: torch.nn.Module, X, y) -> list[torch.Tensor]:
    """Materialised per-example gradients [B, *param.shape] with torch.func."""
    weights = {n: p.detach() for n, p in net.named_parameters()}

    def loss(w, x, t):
        out = functional_call(net, w, (x.unsqueeze(0),))
        return torch.nn.functional.cross_entropy(out, t.unsqueeze(0))

    return list(vmap(grad(loss), in_dims=(None, 0, 0))(weights, X, y).values())


@pytest.fixture
def batch():
    torch.manual_seed(0)
    params = _init_layers(MODEL, torch.tensor([10, 11, 12]), torch.float64)
    X = 2 * torch.randn(K, B, 6, dtype=torch.float64)
    y = torch.randint(0, 4, (K, B))
    inputs, logits = layer_inputs(ARCH, params, X)
    deltas = backprop(ARCH, params, inputs, output_delta(logits, y))
    return params, X, y, inputs, deltas


def test_ghost_norms_match_materialised_per_example_gradients(batch):
    params, X, y, inputs, deltas = batch
    norms = per_example_grad_norms(inputs, deltas)
    for k in range(K):
        g = _per_example_grads(_net(params, k), X[k], y[k])
        expected = torch.cat([gi.reshape(B, -1) for gi in g], dim=1).norm(dim=1)
        torch.testing.assert_close(norms[k], expected, rtol=1e-5, atol=1e-5)


def test_clipped_sum_matches_clip_then_sum(batch):
    params, X, y, inputs, deltas = batch
    clip = per_example_grad_norms(inputs, deltas).median().item()  # clips about half
    summed = clipped_sum(inputs, deltas, clip)
    for k in range(K):
        g = _per_example_grads(_net(params, k), X[k], y[k])
        flat = torch.cat([gi.reshape(B, -1) for gi in g], dim=1)
        factor = (clip / flat.norm(dim=1)).clamp(max=1)
        assert (factor < 1).any() and (factor == 1).any()
        expected = (flat * factor[:, None]).sum(0)
        # torch order: weight [out, in], bias, per layer; ours: W [in, out], b
        ours = torch.cat([(p[k].T if p.dim() == 3 else p[k]).reshape(-1) for p in summed])
        torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")
def test_clipped_gradient_matches_opacus(batch):
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    params, X, y, inputs, deltas = batch
    clip = per_example_grad_norms(inputs, deltas).median().item()
    zeros = [torch.zeros_like(p) for p in params]
    ours = clipped_noisy_gradient(inputs, deltas, clip, 0.0, zeros, expected_batch_size=B)
    for k in range(K):
        model = GradSampleModule(_net(params, k))
        opt = DPOptimizer(
            torch.optim.SGD(model.parameters(), lr=1.0),
            noise_multiplier=0.0,
            max_grad_norm=clip,
            expected_batch_size=B,
        )
        torch.nn.functional.cross_entropy(model(X[k]), y[k]).backward()
        opt.pre_step()
        theirs = [p.grad for p in model.parameters()]
        for mine, ref in zip(ours, theirs):
            ref = ref.T if ref.dim() == 2 else ref
            torch.testing.assert_close(mine[k], ref, rtol=1e-5, atol=1e-5)


def test_full_batch_dp_step_by_hand():
    """Logreg at zero, two points: update = -(lr/B)(sum of clipped gradients + sigma C z)."""
    arch = architecture("logreg", 2, 2)
    X = torch.tensor([[[3.0, 4.0], [1.0, 0.0]]], dtype=torch.float64)
    y = torch.tensor([[0, 1]])
    zero = {"layers.0.weight": torch.zeros(1, 2, 2, dtype=torch.float64),
            "layers.0.bias": torch.zeros(1, 2, dtype=torch.float64)}
    seed, lr, clip, sigma = torch.tensor([77]), 0.3, 2.0, 1.5
    out = to_layers(train(arch, X, y, Recipe(epochs=1, lr=lr), seed, seed, DPNoise(clip, sigma), zero))
    # softmax at zero is (1/2, 1/2): delta_1 = (-1/2, 1/2), delta_2 = (1/2, -1/2)
    # ||g_1||^2 = (9 + 16 + 1) * 1/2 = 13 -> factor 2/sqrt(13); ||g_2||^2 = (1 + 1) * 1/2 = 1 -> 1
    f1 = clip / math.sqrt(13.0)
    d1, d2 = torch.tensor([-0.5, 0.5]), torch.tensor([0.5, -0.5])
    gW = f1 * torch.outer(X[0, 0], d1) + torch.outer(X[0, 1], d2)
    gb = f1 * d1 + d2
    z = rng.normal(seed, rng.stream(rng.Purpose.NOISE, 0), arch.dense.n_params, torch.float64)[0]
    zW, zb = z[:4].reshape(2, 2).T, z[4:]  # the noise is drawn in the module's order: weight [out, in], bias
    torch.testing.assert_close(out[0][0], -(lr / 2) * (gW.double() + sigma * clip * zW))
    torch.testing.assert_close(out[1][0], -(lr / 2) * (gb.double() + sigma * clip * zb))


def _naive_dp_sgd(arch, X, y, recipe, init_seed, train_seed, dp):
    """Reference DP-SGD for one model: loop over steps and examples, autograd per example."""
    n = X.shape[0]
    q, steps = recipe.batch_size / n, recipe.epochs * math.ceil(n / recipe.batch_size)
    spec = arch.dense
    params = [p[0].clone() for p in _init_layers(arch, init_seed, X.dtype)]
    velocity = [torch.zeros_like(p) for p in params]
    for t in range(steps):
        mask = rng.bernoulli(train_seed, rng.stream(rng.Purpose.POISSON, t), n, q)[0]
        total = [torch.zeros_like(p) for p in params]
        for i in torch.nonzero(mask).flatten().tolist():
            w = [p.clone().requires_grad_() for p in params]
            logits = X[i] @ w[0] + w[1]
            h = logits
            for W, b in zip(w[2::2], w[3::2]):
                h = torch.relu(h) @ W + b
            loss = torch.nn.functional.cross_entropy(h.unsqueeze(0), y[i : i + 1])
            g = torch.autograd.grad(loss, w)
            norm = torch.sqrt(sum((gi**2).sum() for gi in g))
            total = [s + gi * min(1.0, dp.clip / norm.item()) for s, gi in zip(total, g)]
        noise_stream = rng.stream(rng.Purpose.NOISE, t)
        z = unflatten_module_order(spec, rng.normal(train_seed, noise_stream, spec.n_params, X.dtype))
        for j, (p, v, s) in enumerate(zip(params, velocity, total)):
            g = (s + dp.noise_multiplier * dp.clip * z[j][0]) / (q * n)
            if j % 2 == 0:
                g = g + arch.l2 * p
            v.mul_(recipe.momentum).add_(g)
            p.sub_(recipe.lr * v)
    return params


def test_poisson_dp_sgd_matches_naive_reference():
    arch = architecture("mlp", 4, 3, hidden=[5], l2=0.05)
    torch.manual_seed(1)
    X = torch.randn(2, 12, 4, dtype=torch.float64)
    y = torch.randint(0, 3, (2, 12))
    recipe = Recipe(epochs=2, lr=0.2, momentum=0.9, batch_size=4)
    dp = DPNoise(clip=0.7, noise_multiplier=0.8)
    init, tr = torch.tensor([5, 6]), torch.tensor([8, 9])
    out = to_layers(train(arch, X, y, recipe, init, tr, dp))
    for k in range(2):
        ref = _naive_dp_sgd(arch, X[k], y[k], recipe, init[k : k + 1], tr[k : k + 1], dp)
        for p, r in zip(out, ref):
            torch.testing.assert_close(p[k], r, rtol=1e-10, atol=1e-10)


def test_noisy_gradient_of_sums_divided_beforehand_is_the_same_gradient():
    """``divided=True`` (the clip factors scaled by 1/B, the noise and canary scaled instead of the sums) is DP-SGD's
    (Σ clipped + canary + σC·z)/B to float rounding."""
    g = torch.Generator().manual_seed(3)
    sums, noise, canary = ([torch.randn(2, 5, 3, generator=g), torch.randn(2, 3, generator=g)] for _ in range(3))
    B, clip, sigma = 17.0, 0.7, 1.3
    expected = [(s + c + sigma * clip * z) / B for s, c, z in zip(sums, canary, noise)]
    got = noisy_gradient([s / B for s in sums], clip, sigma, noise, B, canary, divided=True)
    plain = noisy_gradient([s.clone() for s in sums], clip, sigma, noise, B, canary)
    for e, a, b in zip(expected, got, plain):
        torch.testing.assert_close(a, e)
        torch.testing.assert_close(b, e)
