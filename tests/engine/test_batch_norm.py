"""BatchNorm is honoured: trained non-privately it runs on batch statistics and keeps its running statistics as
per-model buffers, which queries use (eval mode); it trains as plain PyTorch trains it; under per-example clipping
it becomes GroupNorm and the row says so."""

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from arena.engine import rng
from arena.engine.architecture import GROUP_NORM_NOTE, for_per_example_clipping, mode_dependent
from arena.engine.batching import batches, steps_and_rate
from arena.engine.ensemble import Ensemble, init_state, logits
from arena.engine.recipe import Recipe
from arena.engine.trainer import choose_engine, train
from arena.pipeline.execute import model_notes
from tests.engine.models import tiny_resnet

SHAPE = (1, 6, 6)
RECIPE = Recipe(epochs=2, lr=0.1, momentum=0.9, batch_size=10)
INIT, TRAIN = torch.tensor([1, 2, 3]), torch.tensor([10, 20, 30])


def _data(K: int, n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(K, n, math.prod(SHAPE), generator=g) * 2 + 0.5, torch.randint(0, 3, (K, n), generator=g)


@pytest.fixture(scope="module")
def trained():
    arch = tiny_resnet(SHAPE, 3, width=4)
    X, y = _data(3, 30)
    return arch, X, y, train(arch, X, y, RECIPE, INIT, TRAIN)


def _plain_torch(arch, X, y, recipe, init_seed, train_seed, written_out: bool = False):
    """One model as plain PyTorch trains it: ``model.train()``, autograd, the engine's batches, and
    ``torch.optim.SGD``; or, ``written_out``, momentum SGD written out in the engine's order of operations
    (v ← g + μ·v, w ← w − lr·v, as ``HeavyBall`` states it), which ``torch.optim.SGD`` rounds differently
    (it computes μ·v, then adds g): the same update, up to one rounding of the velocity per step."""
    model = arch.build()
    model.load_state_dict({k: v[0] for k, v in init_state(arch, torch.tensor([init_seed])).items()})
    model.train()
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=recipe.lr, momentum=recipe.momentum)
    velocity: list[torch.Tensor] = []
    for Xb, yb, _ in batches(X, y, recipe, rng.Keys(torch.tensor([train_seed]))):
        opt.zero_grad()
        F.cross_entropy(model(Xb[0].reshape(-1, *arch.input_shape)), yb[0]).backward()
        if not written_out:
            opt.step()
            continue
        with torch.no_grad():
            grads = [p.grad.clone() for p in params]
            for g, v in zip(grads, velocity):
                g.add_(v, alpha=recipe.momentum)
            for p, g in zip(params, grads):
                p.add_(g, alpha=-recipe.lr)
            velocity = grads
    return model


def test_running_statistics_are_per_model_buffers_updated_in_training(trained):
    arch, X, y, state = trained
    assert choose_engine(arch) == "functional"  # batched: BatchNorm draws nothing
    init = init_state(arch, INIT)
    steps = steps_and_rate(30, RECIPE)[0]
    for layer in ("bn1", "layer1.0.bn1", "layer1.1.bn2"):
        mean, var = state[f"{layer}.running_mean"], state[f"{layer}.running_var"]
        assert torch.equal(init[f"{layer}.running_mean"], torch.zeros_like(mean))
        assert (mean - init[f"{layer}.running_mean"]).abs().min() > 0
        assert (var - init[f"{layer}.running_var"]).abs().min() > 0
        assert not torch.allclose(mean[0], mean[1]) and not torch.allclose(mean[1], mean[2])
        assert state[f"{layer}.num_batches_tracked"].tolist() == [steps] * 3


def test_batch_norm_trains_as_plain_pytorch_trains_it_alone_or_batched(trained):
    """Each model's parameters and running statistics equal those of ``model.train()`` + ``torch.optim.SGD`` on the
    same batches, to float32 rounding; so a model trains the same alone as in the batch."""
    arch, X, y, state = trained
    for k in range(3):
        model = _plain_torch(arch, X[k : k + 1], y[k : k + 1], RECIPE, int(INIT[k]), int(TRAIN[k]))
        for name, tensor in model.state_dict().items():
            torch.testing.assert_close(state[name][k], tensor, rtol=1e-4, atol=1e-5, msg=name)


def test_a_batch_norm_model_is_queried_in_eval_mode(trained):
    """A record's answer does not depend on the other records of the query (running statistics, not the batch's),
    and equals the module's own eval-mode output."""
    arch, X, _, state = trained
    queries = X[0, :8]
    together = logits(arch, state, queries)
    for i in (0, 5):
        torch.testing.assert_close(logits(arch, state, queries[i : i + 1])[:, 0], together[:, i])
    module = arch.build().eval()
    module.load_state_dict({k: v[2] for k, v in state.items()})
    with torch.no_grad():
        torch.testing.assert_close(together[2], module(queries.reshape(-1, *SHAPE)))


def test_an_ensemble_in_train_mode_updates_running_statistics_and_in_eval_mode_uses_them():
    arch = tiny_resnet(SHAPE, 3, width=4)
    X, _ = _data(2, 8)
    ens = Ensemble(arch, init_state(arch, INIT[:2]), TRAIN[:2])
    ens(X)
    mean = ens.state()["bn1.running_mean"]
    assert (mean.abs() > 0).all() and ens.state()["bn1.num_batches_tracked"].tolist() == [1, 1]
    ens.eval()
    torch.testing.assert_close(ens(X), logits(arch, ens.detached(), X))


def test_under_per_example_clipping_batch_norm_becomes_group_norm_and_the_row_says_so():
    arch = tiny_resnet(SHAPE, 3, width=4)
    fixed = for_per_example_clipping(arch)
    assert fixed.group_norm and not fixed.template().buffers
    assert model_notes(SimpleNamespace(arch=fixed)) == [GROUP_NORM_NOTE]
    assert model_notes(SimpleNamespace(arch=arch)) == []  # non-private: the module as written, nothing to note


def test_releases_of_batch_norm_models_are_keyed_apart_from_those_trained_before_train_mode():
    """The procedure's identity (its cache key) marks mode-dependent modules; BatchNorm-free ones keep their keys."""
    assert mode_dependent(tiny_resnet(SHAPE, 3, width=4))
    assert not mode_dependent(for_per_example_clipping(tiny_resnet(SHAPE, 3, width=4)))


def _task(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Three classes of 6×6 grey images: a class's fixed pattern, scaled, plus Gaussian noise."""
    g = torch.Generator().manual_seed(seed)
    patterns = torch.randn(3, math.prod(SHAPE), generator=torch.Generator().manual_seed(99))
    y = torch.randint(0, 3, (n,), generator=g)
    return 0.8 * patterns[y] + torch.randn(n, math.prod(SHAPE), generator=g) + 1.0, y


@pytest.mark.slow  # ~30-60 s: 4 + 4 ResNet-like models, 8 epochs
def test_batch_norm_accuracy_is_within_noise_of_a_plain_torch_loop():
    """On small data the engine's models (batched) score as plain PyTorch's do (its own shuffles, its own
    initialisations). Tolerance: three standard errors of the difference of the two mean accuracies of K = 4
    models each, from the models' spread (training randomness and test sampling), and at least three of the
    difference of two accuracies on 600 test records (binomial, variance at most 1/(4·600): 0.087); both must beat
    chance (1/3) well, else the test says nothing."""
    arch = tiny_resnet(SHAPE, 3, width=8)
    recipe = Recipe(epochs=8, lr=0.05, momentum=0.9, batch_size=32)
    X, y = _task(300, 0)
    Xt, yt = _task(600, 1)
    K = 4
    state = train(arch, X.expand(K, -1, -1).contiguous(), y.expand(K, -1).contiguous(), recipe,
                  torch.arange(K) + 100, torch.arange(K) + 200)
    engines = (logits(arch, state, Xt).argmax(-1) == yt).float().mean(-1)
    plain = []
    for k in range(K):
        torch.manual_seed(1000 + k)
        model = arch.build().train()
        opt = torch.optim.SGD(model.parameters(), lr=recipe.lr, momentum=recipe.momentum)
        for _ in range(recipe.epochs):
            for idx in torch.randperm(300).split(recipe.batch_size):
                opt.zero_grad()
                F.cross_entropy(model(X[idx].reshape(-1, *SHAPE)), y[idx]).backward()
                opt.step()
        with torch.no_grad():
            plain.append((model.eval()(Xt.reshape(-1, *SHAPE)).argmax(-1) == yt).float().mean().item())
    plains = torch.tensor(plain)
    engine, torch_accuracy = engines.mean().item(), plains.mean().item()
    spread = math.sqrt((engines.var() / K + plains.var() / K).item())
    tolerance = 3 * max(spread, math.sqrt(2 * 0.25 / 600))
    assert engine > 0.6 and torch_accuracy > 0.6, (engine, torch_accuracy)
    assert abs(engine - torch_accuracy) < tolerance, (engines, plains, tolerance)
