"""Batched models: shapes, per-seed initialisation, forward and hand-written backprop."""

import pytest
import torch

from arena.models import (
    Architecture,
    backprop,
    flatten,
    forward,
    init_params,
    layer_inputs,
    output_delta,
    sum_gradients,
    unflatten,
)

MLP = Architecture("mlp", in_dim=5, n_classes=3, hidden=(7, 4), activation="tanh", l2=0.1)


def test_shapes_and_param_count():
    arch = Architecture("mlp", in_dim=64, n_classes=10, hidden=[16])
    assert arch.hidden == (16,)
    assert arch.layer_shapes() == [(64, 16), (16, 10)]
    assert arch.n_params == 64 * 16 + 16 + 16 * 10 + 10
    assert Architecture("logreg", 30, 2).layer_shapes() == [(30, 2)]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kind": "logreg", "in_dim": 3, "n_classes": 2, "hidden": (4,)},
        {"kind": "mlp", "in_dim": 3, "n_classes": 2},
        {"kind": "logreg", "in_dim": 3, "n_classes": 1},
        {"kind": "logreg", "in_dim": 3, "n_classes": 2, "l2": -1.0},
        {"kind": "mlp", "in_dim": 3, "n_classes": 2, "hidden": (4,), "activation": "gelu"},
    ],
)
def test_invalid_architectures_are_rejected(kwargs):
    with pytest.raises(ValueError):
        Architecture(**kwargs)


def test_init_depends_only_on_own_seed_and_is_linear_like():
    seeds = torch.tensor([3, 1, 4, 1, 5], dtype=torch.int64)
    batch = init_params(MLP, seeds, dtype=torch.float64)
    alone = init_params(MLP, seeds[2:3], dtype=torch.float64)
    for pb, pa in zip(batch, alone):
        assert torch.equal(pb[2:3], pa)
    assert torch.equal(flatten(batch)[1], flatten(batch)[3])  # equal seeds, equal models
    assert not torch.equal(flatten(batch)[0], flatten(batch)[1])
    for (fan_in, _), W, b in zip(MLP.layer_shapes(), batch[0::2], batch[1::2]):
        assert W.dtype == torch.float64
        assert W.abs().max() < fan_in**-0.5 and b.abs().max() < fan_in**-0.5
    big = init_params(Architecture("logreg", 400, 50), torch.tensor([0]))
    assert big[0].abs().max() > 0.98 * 400**-0.5  # fills the interval


def test_flatten_roundtrip():
    params = init_params(MLP, torch.arange(4))
    flat = flatten(params)
    assert flat.shape == (4, MLP.n_params)
    assert all(torch.equal(a, b) for a, b in zip(unflatten(MLP, flat), params))


def _torch_module(arch: Architecture, params, k: int) -> torch.nn.Sequential:
    act = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh, "sigmoid": torch.nn.Sigmoid}
    layers = []
    for i, (W, b) in enumerate(zip(params[0::2], params[1::2])):
        lin = torch.nn.Linear(*W.shape[1:], dtype=W.dtype)
        lin.weight.data, lin.bias.data = W[k].T.clone(), b[k].clone()
        layers += [lin] if i == len(params) // 2 - 1 else [lin, act[arch.activation]()]
    return torch.nn.Sequential(*layers)


@pytest.mark.parametrize("activation", ["relu", "tanh", "sigmoid"])
def test_forward_and_backprop_match_torch_autograd(activation):
    arch = Architecture("mlp", 5, 3, hidden=(7, 4), activation=activation)
    params = init_params(arch, torch.arange(3), dtype=torch.float64)
    X = torch.randn(3, 11, 5, dtype=torch.float64)
    y = torch.randint(0, 3, (3, 11))
    inputs, logits = layer_inputs(arch, params, X)
    grads = sum_gradients(inputs, backprop(arch, params, inputs, output_delta(logits, y) / 11))
    for k in range(3):
        net = _torch_module(arch, params, k)
        out = net(X[k])
        torch.testing.assert_close(logits[k], out, rtol=0, atol=1e-12)
        torch.nn.functional.cross_entropy(out, y[k]).backward()
        lins = [m for m in net if isinstance(m, torch.nn.Linear)]
        for lin, gW, gb in zip(lins, grads[0::2], grads[1::2]):
            torch.testing.assert_close(gW[k], lin.weight.grad.T, rtol=0, atol=1e-12)
            torch.testing.assert_close(gb[k], lin.bias.grad, rtol=0, atol=1e-12)


def test_shared_inputs_equal_expanded_inputs():
    params = init_params(MLP, torch.arange(4), dtype=torch.float64)
    X = torch.randn(9, 5, dtype=torch.float64)
    torch.testing.assert_close(
        forward(MLP, params, X), forward(MLP, params, X.expand(4, 9, 5)), rtol=0, atol=1e-14
    )
