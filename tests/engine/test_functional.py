"""The torch.func engine: any module trains the same alone or inside a batch of models, chunked or not, and the
same as the hand path (dense nets) and as plain PyTorch SGD on the same seeds."""

from __future__ import annotations

import pytest
import torch

from arena.contracts.release import Models
from arena.engine.architecture import Architecture
from arena.engine.augment import Augment
from arena.engine.ensemble import init_state
from arena.engine.functional import mean_gradient
from arena.engine.recipe import DPNoise, Recipe
from arena.engine.trainer import models_per_chunk, train
from tests.conftest import architecture

SHAPE = (1, 8, 8)
CLASSES = 4
MODELS = {
    "cnn": {"name": "cnn", "channels": [4, 8], "hidden": 16, "l2": 0.01},
    "cnn-group": {"name": "cnn", "channels": [4, 8], "hidden": 16, "norm": "group", "groups": 2},
    "mlp": {"name": "mlp", "hidden": [12], "activation": "tanh", "l2": 0.01},
}
SGD = Recipe(epochs=2, lr=0.1, momentum=0.9, batch_size=8)
AUGMENTED = Recipe(epochs=2, lr=0.1, momentum=0.9, batch_size=8, augment=Augment(crop=2, flip=True))
DP = DPNoise(clip=0.5, noise_multiplier=0.8)
MODES = {
    "sgd": (SGD, None),
    "dpsgd": (SGD, DP),
    "sgd-augment": (AUGMENTED, None),
    "dpsgd-augment": (AUGMENTED, DP),
}


def _arch(model: str) -> Architecture:
    options = dict(MODELS[model])
    return architecture(options.pop("name"), SHAPE, CLASSES, **options)


def _data(K: int, n: int, seed: int = 0, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """K training sets of n images in [0, 1] (flat, as the engine takes them) with labels."""
    g = torch.Generator().manual_seed(seed)
    return torch.rand(K, n, 64, generator=g, dtype=dtype), torch.randint(0, CLASSES, (K, n), generator=g)


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = 1e-9) -> None:
    assert list(a) == list(b)
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=atol, atol=atol, msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("model", list(MODELS))
def test_a_model_trains_the_same_alone_or_inside_a_batch(model, mode):
    arch, (recipe, dp) = _arch(model), MODES[mode]
    X, y = _data(3, 16)
    init, seeds = torch.tensor([5, 6, 7]), torch.tensor([50, 60, 70])
    batched = train(arch, X, y, recipe, init, seeds, dp, engine="functional")
    start = init_state(arch, init, X.dtype)
    for k in range(3):
        alone = train(arch, X[k : k + 1], y[k : k + 1], recipe, init[k : k + 1], seeds[k : k + 1], dp,
                      engine="functional")
        _assert_same({n: t[k : k + 1] for n, t in batched.items()}, alone)
    first = next(iter(batched))
    assert not torch.allclose(batched[first][0], batched[first][1])  # different seeds, different models
    assert not torch.allclose(batched[first], start[first])  # and training moved them


@pytest.mark.slow
def test_augmentation_and_noise_change_the_models():
    """The equivalences above would hold vacuously if augmentation or the DP step were no-ops."""
    arch = _arch("cnn")
    X, y = _data(1, 16)
    seeds = torch.tensor([3])
    plain, augmented = (train(arch, X, y, r, seeds, seeds, engine="functional") for r in (SGD, AUGMENTED))
    private = train(arch, X, y, SGD, seeds, seeds, DP, engine="functional")
    for other in (augmented, private):
        assert not torch.allclose(plain["0.weight"], other["0.weight"], atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sgd", "dpsgd", "dpsgd-augment", "full-batch-dpsgd"])
def test_the_hand_path_and_torch_func_train_the_same_mlp(mode):
    """Same seeds, same init, same batches, same noise draw (the hand path reads it in module order)."""
    recipe, dp = MODES[mode] if mode in MODES else (Recipe(epochs=3, lr=0.3), DP)
    arch = _arch("mlp")
    X, y = _data(3, 16, seed=1)
    init, seeds = torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6])
    hand = train(arch, X, y, recipe, init, seeds, dp, engine="dense")
    functional = train(arch, X, y, recipe, init, seeds, dp, engine="functional")
    _assert_same(hand, functional)
    assert not torch.allclose(hand["layers.0.weight"], init_state(arch, init, X.dtype)["layers.0.weight"])


@pytest.mark.slow
@pytest.mark.parametrize("dp", [None, DP], ids=["sgd", "dpsgd"])
@pytest.mark.parametrize("model", ["cnn", "mlp"])
def test_chunking_to_a_tiny_memory_budget_changes_nothing(model, dp):
    """A budget of 24 bytes per parameter: one model per chunk and 3 examples per vmap call (8 bytes per
    parameter and example); the default budget: all models in one chunk, the whole batch in one call."""
    arch = _arch(model)
    X, y = _data(3, 16, seed=2)
    tiny_budget = 24 * arch.template().n_params
    assert models_per_chunk(arch, AUGMENTED, 16, dp, tiny_budget) == 1
    assert models_per_chunk(arch, AUGMENTED, 16, dp, 2**30) >= 3
    init, seeds = torch.tensor([7, 8, 9]), torch.tensor([1, 2, 3])
    whole = train(arch, X, y, AUGMENTED, init, seeds, dp, engine="functional", budget=2**30)
    tiny = train(arch, X, y, AUGMENTED, init, seeds, dp, engine="functional", budget=tiny_budget)
    _assert_same(whole, tiny)


@pytest.mark.slow
def test_the_functional_cnn_step_is_plain_torch_sgd_with_momentum_and_weight_decay():
    """One CNN, full batch: the engine's update equals torch.optim.SGD on the same module with the penalty
    (l2/2)·||w||² on weight tensors only (conv and linear weights, not biases)."""
    arch = _arch("cnn")
    recipe = Recipe(epochs=4, lr=0.1, momentum=0.9)
    X, y = _data(1, 16, seed=3)
    seed = torch.tensor([11])
    ours = train(arch, X, y, recipe, seed, seed, engine="functional")

    net = arch.build().double()
    net.load_state_dict({n: t[0] for n, t in init_state(arch, seed, torch.float64).items()})
    opt = torch.optim.SGD(net.parameters(), lr=recipe.lr, momentum=recipe.momentum)
    images = X[0].reshape(-1, *SHAPE)
    for _ in range(recipe.epochs):
        opt.zero_grad()
        penalty = sum(p.square().sum() for p in net.parameters() if p.ndim >= 2)
        (torch.nn.functional.cross_entropy(net(images), y[0]) + 0.5 * arch.l2 * penalty).backward()
        opt.step()
    _assert_same(ours, {n: p.detach()[None] for n, p in net.state_dict().items()})


@pytest.mark.slow
def test_a_batch_norm_cnn_trains_non_privately():
    arch = architecture("cnn", SHAPE, CLASSES, channels=[4, 8], hidden=16, norm="batch")
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in arch.build().modules())
    g = torch.Generator().manual_seed(4)
    y = torch.randint(0, CLASSES, (2, 32), generator=g)
    X = (torch.rand(2, 32, 64, generator=g) * 0.2 + y[..., None] * 0.25).float()  # a learnable signal
    seeds = torch.tensor([0, 1])
    start = Models(arch, init_state(arch, seeds))
    trained = Models(arch, train(arch, X, y, Recipe(epochs=30, lr=0.1, momentum=0.9), seeds, seeds))
    before, after = (m.loss(X, y).mean(-1) for m in (start, trained))
    assert (after < 0.5 * before).all(), (before, after)
    assert (trained.accuracy(X, y) > 0.6).all()  # chance is 0.25


@pytest.mark.slow
@pytest.mark.parametrize("model", ["cnn", "cnn-group", "cnn-batch"])
def test_every_non_private_gradient_path_gives_the_vmap_gradient(model):
    """The layer-by-layer path (plain stacks) and one model without ``vmap`` (any module) equal ``vmap(grad)``."""
    arch = _arch(model) if model in MODELS else architecture("cnn", SHAPE, CLASSES, channels=[4], hidden=8,
                                                             norm="batch")
    X, y = _data(3, 6, seed=5)
    state = init_state(arch, torch.tensor([1, 2, 3]), X.dtype)
    template = arch.template()
    params, buffers = {k: state[k] for k in template.trainable}, {k: state[k] for k in template.buffers}
    images = X.reshape(3, 6, *SHAPE)
    reference = mean_gradient(arch, params, buffers, images, y, method="vmap")
    _assert_same(mean_gradient(arch, params, buffers, images, y), reference)
    for k in range(3):
        alone = mean_gradient(arch, {n: t[k : k + 1] for n, t in params.items()},
                              {n: t[k : k + 1] for n, t in buffers.items()}, images[k : k + 1], y[k : k + 1])
        _assert_same(alone, {n: t[k : k + 1] for n, t in reference.items()})
    if template.ghost is None:
        with pytest.raises(ValueError, match="layer-by-layer"):
            mean_gradient(arch, params, buffers, images, y, method="ghost")
    else:
        _assert_same(mean_gradient(arch, params, buffers, images, y, method="ghost"), reference)


@pytest.mark.slow
def test_a_module_outside_the_layer_stacks_trains_the_same_alone_or_inside_a_batch():
    """A batch-norm CNN has no layer-by-layer plan: alone it skips ``vmap``, in a batch it runs under it."""
    arch = architecture("cnn", SHAPE, CLASSES, channels=[4], hidden=8, norm="batch")
    assert arch.template().ghost is None
    X, y = _data(3, 16, seed=6)
    init, seeds = torch.tensor([5, 6, 7]), torch.tensor([50, 60, 70])
    batched = train(arch, X, y, SGD, init, seeds)
    for k in range(3):
        alone = train(arch, X[k : k + 1], y[k : k + 1], SGD, init[k : k + 1], seeds[k : k + 1])
        _assert_same({n: t[k : k + 1] for n, t in batched.items()}, alone)
