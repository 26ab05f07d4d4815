"""The hand path for dense nets: shapes, per-seed initialisation, layouts, forward and hand-written backprop."""

import pytest
import torch

from arena.contracts.release import Models
from arena.engine.dense import (
    Dense,
    backprop,
    flatten,
    forward,
    layer_inputs,
    output_delta,
    sum_gradients,
    to_layers,
    to_state,
    unflatten,
    unflatten_module_order,
)
from arena.engine.ensemble import init_state
from tests.conftest import architecture

MODEL = architecture("mlp", 5, 3, hidden=[7, 4], activation="tanh", l2=0.1)
MLP: Dense = MODEL.dense


def _layers(arch, seeds: torch.Tensor, dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    return to_layers(init_state(arch, seeds, dtype))


def test_shapes_and_param_count():
    arch = Dense("mlp", in_dim=64, n_classes=10, hidden=[16])
    assert arch.hidden == (16,)
    assert arch.layer_shapes() == [(64, 16), (16, 10)]
    assert arch.n_params == 64 * 16 + 16 + 16 * 10 + 10
    assert Dense("logreg", 30, 2).layer_shapes() == [(30, 2)]


def test_the_plugins_describe_their_modules():
    """The dense description of the mlp plugin has the module's own parameter count, activation and l2."""
    assert Dense("mlp", 5, 3, (7, 4), "tanh", 0.1) == MLP
    assert MLP.n_params == MODEL.template().n_params
    assert architecture("logreg", (1, 8, 8), 10).dense == Dense("logreg", 64, 10)
    assert architecture("cnn", (1, 8, 8), 10).dense is None


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
        Dense(**kwargs)


def test_init_depends_only_on_own_seed_and_is_linear_like():
    seeds = torch.tensor([3, 1, 4, 1, 5], dtype=torch.int64)
    batch = _layers(MODEL, seeds, torch.float64)
    alone = _layers(MODEL, seeds[2:3], torch.float64)
    for pb, pa in zip(batch, alone):
        assert torch.equal(pb[2:3], pa)
    assert torch.equal(flatten(batch)[1], flatten(batch)[3])  # equal seeds, equal models
    assert not torch.equal(flatten(batch)[0], flatten(batch)[1])
    for (fan_in, _), W, b in zip(MLP.layer_shapes(), batch[0::2], batch[1::2]):
        assert W.dtype == torch.float64
        assert W.abs().max() < fan_in**-0.5 and b.abs().max() < fan_in**-0.5
    big = _layers(architecture("logreg", 400, 50), torch.tensor([0]))
    assert big[0].abs().max() > 0.98 * 400**-0.5  # fills the interval


def test_flatten_roundtrip():
    params = _layers(MODEL, torch.arange(4))
    flat = flatten(params)
    assert flat.shape == (4, MLP.n_params)
    assert all(torch.equal(a, b) for a, b in zip(unflatten(MLP, flat), params))


def test_layouts_convert_both_ways():
    """to_layers transposes each weight to [K, in, out]; to_state undoes it; the module-order reading of the
    flattened module parameters gives back the same layers (so one noise draw lands alike in both paths)."""
    state = init_state(MODEL, torch.arange(3))
    layers = to_layers(state)
    assert [tuple(t.shape) for t in layers] == [(3, 5, 7), (3, 7), (3, 7, 4), (3, 4), (3, 4, 3), (3, 3)]
    back = to_state(list(state), layers)
    assert list(back) == list(state) and all(torch.equal(back[k], state[k]) for k in state)
    flat = Models(MODEL, state).flat()
    assert all(torch.equal(a, b) for a, b in zip(unflatten_module_order(MLP, flat), layers))


def _torch_module(arch: Dense, params, k: int) -> torch.nn.Sequential:
    act = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh, "sigmoid": torch.nn.Sigmoid}
    layers = []
    for i, (W, b) in enumerate(zip(params[0::2], params[1::2])):
        lin = torch.nn.Linear(*W.shape[1:], dtype=W.dtype)
        lin.weight.data, lin.bias.data = W[k].T.clone(), b[k].clone()
        layers += [lin] if i == len(params) // 2 - 1 else [lin, act[arch.activation]()]
    return torch.nn.Sequential(*layers)


@pytest.mark.parametrize("activation", ["relu", "tanh", "sigmoid"])
def test_forward_and_backprop_match_torch_autograd(activation):
    model = architecture("mlp", 5, 3, hidden=[7, 4], activation=activation)
    arch = model.dense
    params = _layers(model, torch.arange(3), torch.float64)
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
    params = _layers(MODEL, torch.arange(4), torch.float64)
    X = torch.randn(9, 5, dtype=torch.float64)
    torch.testing.assert_close(
        forward(MLP, params, X), forward(MLP, params, X.expand(4, 9, 5)), rtol=0, atol=1e-14
    )


def test_hand_forward_equals_the_plugin_module():
    """Models.logits takes the hand path for dense models; it must be the plugin's own module's function."""
    state = init_state(MODEL, torch.arange(2), torch.float64)
    X = torch.randn(6, 5, dtype=torch.float64)
    module = MODEL.build().double()
    for k in range(2):
        module.load_state_dict({n: t[k] for n, t in state.items()})
        torch.testing.assert_close(Models(MODEL, state).logits(X)[k], module(X).detach(), rtol=0, atol=1e-6)
