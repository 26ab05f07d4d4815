"""The white-box ``Models`` API: ``Models.module(k)`` is a differentiable ``nn.Module`` of model k with its
weights, answering what the arena's batched forward pass answers; per-example gradients through torch.func."""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call, grad, vmap

import arena
from arena.engine.ensemble import init_state
from tests.conftest import architecture


@pytest.mark.parametrize(("model", "params", "shape"), [
    ("mlp", {"hidden": [6]}, (1, 8, 8)),
    ("cnn", {"channels": [2, 3], "hidden": 5}, (1, 8, 8)),
])
def test_module_k_answers_the_models_logits_and_is_differentiable(model, params, shape) -> None:
    arch = architecture(model, shape, 4, **params)
    models = arena.Models(arch, init_state(arch, torch.tensor([1, 2, 3])))
    X = torch.rand(7, 64, generator=torch.Generator().manual_seed(0))
    batched = models.logits(X)
    for k in range(3):
        module = models.module(k)
        assert not module.training
        torch.testing.assert_close(module(X.reshape(-1, *models.input_shape)), batched[k], rtol=1e-5, atol=1e-6)
        loss = torch.nn.functional.cross_entropy(module(X.reshape(-1, *shape)), torch.zeros(7, dtype=torch.long))
        grads = torch.autograd.grad(loss, list(module.parameters()))
        assert all(g.shape == p.shape for g, p in zip(grads, module.parameters())) and any(g.abs().sum() > 0
                                                                                          for g in grads)
    first = next(iter(models.state))
    with torch.no_grad():
        next(iter(models.module(0).parameters())).add_(1.0)
    assert torch.equal(models.state[first], init_state(arch, torch.tensor([1, 2, 3]))[first])  # copies
    assert models.module(-1, train=True).training
    with pytest.raises(IndexError):
        models.module(3)


def test_per_example_gradients_by_torch_func_are_each_examples_own() -> None:
    """The docs' recipe: vmap(grad(loss)) over examples equals one autograd call per example."""
    arch = architecture("mlp", 5, 3, hidden=[4])
    models = arena.Models(arch, init_state(arch, torch.tensor([7])))
    module = models.module(0)
    params = {n: p.detach() for n, p in module.named_parameters()}
    X, y = torch.randn(6, *models.input_shape), torch.tensor([0, 1, 2, 0, 1, 2])

    def loss(p, x, t):
        return torch.nn.functional.cross_entropy(functional_call(module, p, (x.unsqueeze(0),)), t.unsqueeze(0))

    per_example = vmap(grad(loss), in_dims=(None, 0, 0))(params, X, y)
    for i in range(6):
        module.zero_grad()
        torch.nn.functional.cross_entropy(module(X[i : i + 1]), y[i : i + 1]).backward()
        for name, p in module.named_parameters():
            torch.testing.assert_close(per_example[name][i], p.grad)
