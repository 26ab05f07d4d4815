"""Trainer: batching over models changes nothing, and it equals plain torch SGD with momentum."""

import itertools
import math
import os
import platform
import subprocess
import sys

import pytest
import torch

from arena.engine import conv_kernel, dense_kernel, rng, rng_kernel, trainer
from arena.engine.batching import _poisson_batch, model_passes, steps_and_rate
from arena.engine.dense import to_layers, unflatten_module_order
from arena.engine.ensemble import init_state
from arena.engine.recipe import DPNoise, Recipe
from arena.engine.trainer import train
from tests.conftest import architecture

LOGREG = architecture("logreg", 6, 3, l2=0.01)
MLP = architecture("mlp", 6, 3, hidden=[8], activation="tanh", l2=0.01)
RECIPES = {
    "minibatch": (Recipe(epochs=3, lr=0.1, momentum=0.9, batch_size=7), None),
    "full": (Recipe(epochs=5, lr=0.5, momentum=0.5), None),
    "dp": (Recipe(epochs=3, lr=0.1, momentum=0.9, batch_size=7), DPNoise(1.0, 1.1)),
    "dp_full": (Recipe(epochs=3, lr=0.3), DPNoise(0.5, 2.0)),
}


def _data(K: int, n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(K, n, 6, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (K, n), generator=g)
    return X, y


@pytest.mark.parametrize("arch", [LOGREG, MLP], ids=["logreg", "mlp"])
@pytest.mark.parametrize("mode", list(RECIPES))
def test_batched_training_equals_one_model_at_a_time(arch, mode):
    recipe, dp = RECIPES[mode]
    X, y = _data(5, 30)
    init, tr = torch.tensor([1, 2, 3, 4, 5]), torch.tensor([10, 20, 30, 40, 50])
    batched = train(arch, X, y, recipe, init, tr, dp)
    for k in range(5):
        alone = train(arch, X[k : k + 1], y[k : k + 1], recipe, init[k : k + 1], tr[k : k + 1], dp)
        assert list(alone) == list(batched)
        for name, pa in alone.items():
            torch.testing.assert_close(batched[name][k : k + 1], pa, rtol=1e-5, atol=1e-5)
    first = batched["layers.0.weight"]
    assert not torch.allclose(first[0], first[1])


@pytest.mark.skipif(rng_kernel.library() is None, reason="kernels off or not built")
@pytest.mark.parametrize("engine", ["dense", "functional"])
def test_float32_dp_training_through_the_kernels_is_the_same_alone_batched_or_without_them(engine, monkeypatch):
    """In float32 on the CPU the noise is added into the sums by the kernel (and the dense path's clip factors come
    from one): a model trains the same alone or in a batch, and as the eager passes train it, to float rounding."""
    X, y = _data(4, 30)
    X = X.float()
    recipe, dp, init, tr = RECIPES["dp"][0], DPNoise(1.0, 1.1), torch.tensor([1, 2, 3, 4]), torch.tensor([5, 6, 7, 8])
    added = []
    adder = rng.NormalAdder.__call__
    monkeypatch.setattr(rng.NormalAdder, "__call__", lambda self, *a: added.append(adder(self, *a)) or added[-1])
    batched = train(MLP, X, y, recipe, init, tr, dp, engine=engine)
    assert added and all(added)
    for k in (0, 3):
        alone = train(MLP, X[k : k + 1], y[k : k + 1], recipe, init[k : k + 1], tr[k : k + 1], dp, engine=engine)
        for name, pa in alone.items():
            torch.testing.assert_close(batched[name][k : k + 1], pa, rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(rng_kernel, "usable", lambda *tensors: None)
    monkeypatch.setattr(dense_kernel, "library", lambda: None)
    added.clear()
    eager = train(MLP, X, y, recipe, init, tr, dp, engine=engine)
    assert not any(added)
    for name, pe in eager.items():
        torch.testing.assert_close(batched[name], pe, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(conv_kernel.library() is None, reason="kernels off or not built")
def test_float32_dp_training_of_a_cnn_through_the_conv_kernel_is_the_same_alone_batched_or_without_it(monkeypatch):
    """The convolutions' per-example norms come from the C kernel in float32 (one layer's gradients formed, the
    other's ghost norm), the dense head's clipping from the dense kernel: a CNN trains the same alone or in a batch,
    and as the eager passes train it."""
    cnn = architecture("cnn", (1, 8, 8), 3, channels=[4, 16], hidden=8)
    g = torch.Generator().manual_seed(2)
    X, y = torch.rand(3, 40, 64, generator=g), torch.randint(0, 3, (3, 40), generator=g)
    recipe, dp = Recipe(epochs=2, lr=0.1, momentum=0.9, batch_size=8), DPNoise(1.0, 1.1)
    init, tr = torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6])
    calls: list[bool] = []
    norms = conv_kernel.norms
    monkeypatch.setattr(conv_kernel, "norms", lambda m, a, G, K, mat: calls.append(mat) or norms(m, a, G, K, mat))
    tails: list[bool] = []
    clipped = dense_kernel.clipped
    monkeypatch.setattr(dense_kernel, "clipped", lambda *a, **kw: tails.append(kw["extra"] is not None)
                        or clipped(*a, **kw))
    batched = train(cnn, X, y, recipe, init, tr, dp)
    assert True in calls and False in calls  # both of the kernel's ways ran
    assert tails and all(tails)  # the head through the dense kernel, with the convolutions' norms
    for k in (0, 2):
        alone = train(cnn, X[k : k + 1], y[k : k + 1], recipe, init[k : k + 1], tr[k : k + 1], dp)
        for name, pa in alone.items():
            torch.testing.assert_close(batched[name][k : k + 1], pa, rtol=1e-4, atol=1e-5)
    monkeypatch.setattr(conv_kernel, "library", lambda: None)
    monkeypatch.setattr(dense_kernel, "library", lambda: None)
    eager = train(cnn, X, y, recipe, init, tr, dp)
    for name, pe in eager.items():
        torch.testing.assert_close(batched[name], pe, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("engine", ["dense", "functional"])
@pytest.mark.parametrize("batch_size", [7, None], ids=["minibatch", "full"])
def test_matches_torch_sgd_with_momentum(batch_size, engine):
    recipe = Recipe(epochs=3, lr=0.1, momentum=0.9, batch_size=batch_size)
    X, y = _data(1, 30, seed=1)
    init, tr = torch.tensor([3]), torch.tensor([4])
    ours = to_layers(train(MLP, X, y, recipe, init, tr, engine=engine))

    params = to_layers(init_state(MLP, init, torch.float64))
    lin1, lin2 = (
        torch.nn.Linear(6, 8, dtype=torch.float64),
        torch.nn.Linear(8, 3, dtype=torch.float64),
    )
    for lin, W, b in ((lin1, params[0], params[1]), (lin2, params[2], params[3])):
        lin.weight.data, lin.bias.data = W[0].T.clone(), b[0].clone()
    net = torch.nn.Sequential(lin1, torch.nn.Tanh(), lin2)
    opt = torch.optim.SGD(net.parameters(), lr=recipe.lr, momentum=recipe.momentum)
    for epoch in range(recipe.epochs):
        if batch_size is None:
            batches = [torch.arange(30)]
        else:
            perm = rng.permutation(tr, rng.stream(rng.Purpose.SHUFFLE, epoch), 30)[0]
            batches = perm.split(batch_size)  # last partial batch of 2 included
        for idx in batches:
            opt.zero_grad()
            penalty = 0.5 * MLP.l2 * (lin1.weight.square().sum() + lin2.weight.square().sum())
            (torch.nn.functional.cross_entropy(net(X[0, idx]), y[0, idx]) + penalty).backward()
            opt.step()
    expected = [lin1.weight.T, lin1.bias, lin2.weight.T, lin2.bias]
    for mine, ref in zip(ours, expected):
        torch.testing.assert_close(mine[0], ref.detach(), rtol=1e-5, atol=1e-5)


def test_steps_and_rate():
    assert steps_and_rate(1000, Recipe(epochs=3, lr=0.1)) == (3, 1.0)
    assert steps_and_rate(1000, Recipe(epochs=3, lr=0.1, batch_size=40)) == (75, 0.04)
    assert steps_and_rate(1000, Recipe(epochs=2, lr=0.1, batch_size=300)) == (8, 0.3)
    assert steps_and_rate(100, Recipe(epochs=2, lr=0.1, batch_size=500)) == (2, 1.0)


@pytest.mark.parametrize("engine", ["dense", "functional"])
def test_dp_training_takes_the_accounted_number_of_steps(engine):
    """With a negligible clip the result is the sum of exactly `steps` noise draws (module order: weight, bias)."""
    arch = architecture("logreg", 2, 2)
    recipe = Recipe(epochs=2, lr=1.0, batch_size=3)
    steps, _ = steps_and_rate(10, recipe)
    X, y = torch.zeros(1, 10, 2, dtype=torch.float64), torch.zeros(1, 10, dtype=torch.int64)
    zero = {"layers.0.weight": torch.zeros(1, 2, 2, dtype=torch.float64),
            "layers.0.bias": torch.zeros(1, 2, dtype=torch.float64)}
    seed = torch.tensor([0])
    clip = 1e-12  # clipped data term is negligible; noise std is 1e-12 * 1e12 = 1
    out = train(arch, X, y, recipe, seed, seed, DPNoise(clip, 1e12), zero, engine=engine)
    z = sum(
        rng.normal(seed, rng.stream(rng.Purpose.NOISE, t), arch.dense.n_params, torch.float64)
        for t in range(steps)
    )
    torch.testing.assert_close(out["layers.0.weight"][0], -z[0, :4].reshape(2, 2) / 3, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(out["layers.0.bias"][0], -z[0, 4:] / 3, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("engine", ["dense", "functional"])
def test_follows_input_dtype_and_leaves_given_params_untouched(engine):
    X, y = _data(2, 10)
    seeds = torch.tensor([0, 1])
    out32 = train(MLP, X.float(), y, Recipe(epochs=1, lr=0.1), seeds, seeds, engine=engine)
    assert all(p.dtype == torch.float32 for p in out32.values())
    start = init_state(MLP, seeds, torch.float64)
    copy = {k: p.clone() for k, p in start.items()}
    out = train(MLP, X, y, Recipe(epochs=1, lr=0.1), seeds, seeds, state=start, engine=engine)
    assert all(torch.equal(start[k], copy[k]) for k in start)
    assert not torch.equal(out["layers.0.weight"], start["layers.0.weight"])


def test_rejects_mismatched_shapes():
    X, y = _data(2, 10)
    with pytest.raises(ValueError):
        train(MLP, X, y[:1], Recipe(epochs=1, lr=0.1), torch.tensor([0, 1]), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="5 features"):
        train(MLP, X[..., :5], y, Recipe(epochs=1, lr=0.1), torch.tensor([0, 1]), torch.tensor([0, 1]))


def test_the_hand_path_is_refused_for_a_model_without_one():
    cnn = architecture("cnn", (1, 4, 4), 3, channels=[2], hidden=0)
    X, y = torch.rand(1, 4, 16), torch.zeros(1, 4, dtype=torch.int64)
    with pytest.raises(ValueError, match="no hand-written path"):
        train(cnn, X, y, Recipe(epochs=1, lr=0.1), torch.tensor([0]), torch.tensor([0]), engine="dense")


def _valid(counts: list[int], B: int) -> torch.Tensor:
    return torch.arange(B) < torch.tensor(counts).unsqueeze(1)


def test_a_poisson_batch_holds_each_models_sampled_rows_in_order_then_masked_padding():
    X = torch.arange(3 * 5 * 2, dtype=torch.float64).reshape(3, 5, 2)
    y = torch.arange(15).reshape(3, 5)
    mask = torch.tensor([[1, 0, 1, 0, 1], [0, 0, 0, 0, 0], [0, 0, 0, 1, 0]], dtype=torch.bool)
    Xb, yb, valid = _poisson_batch(X, y, *rng.rows_of(mask))
    assert valid is not None and valid.tolist() == [[True] * 3, [False] * 3, [True, False, False]]
    for k, rows in enumerate([[0, 2, 4], [], [3]]):
        assert torch.equal(Xb[k, : len(rows)], X[k, rows]) and yb[k, : len(rows)].tolist() == y[k, rows].tolist()
    alone = _poisson_batch(X[2:], y[2:], *rng.rows_of(mask[2:]))  # one model: its rows alone, no padding
    assert alone[2] is None and torch.equal(alone[0], X[2:, [3]]) and alone[1].tolist() == [[13]]


def _best_cost(counts: list[int], per_pass: int, pass_rows: float) -> float:
    """The least cost over every split of the sorted counts into runs of at most ``per_pass``, by brute force."""
    c, best = sorted(counts), math.inf
    for cuts in itertools.product([False, True], repeat=len(c) - 1):
        bounds = [0] + [i + 1 for i, cut in enumerate(cuts) if cut] + [len(c)]
        runs = list(zip(bounds[:-1], bounds[1:]))
        if all(b - a <= per_pass for a, b in runs):
            best = min(best, sum((b - a) * c[b - 1] + pass_rows for a, b in runs))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_models_go_in_passes_of_like_counts_at_the_least_cost(seed):
    g = torch.Generator().manual_seed(seed)
    K, B = 9, 20
    counts = torch.randint(0, B + 1, (K,), generator=g).tolist()
    per_pass, pass_rows = [3, 4, 9][seed % 3], [0.0, 5.0, 40.0][seed // 2]
    passes = model_passes(_valid(counts, B), K, B, per_pass, pass_rows)
    models = torch.cat([torch.as_tensor(m) for m, _ in passes])
    assert sorted(models.tolist()) == list(range(K))  # each model in exactly one pass
    assert all(len(m) <= per_pass and rows == max(counts[i] for i in m.tolist()) for m, rows in passes)
    cost = sum(len(m) * rows + pass_rows for m, rows in passes)
    assert cost == pytest.approx(_best_cost(counts, per_pass, pass_rows))


def test_passes_without_a_mask_are_equal_slices():
    assert model_passes(None, 10, 7, 4, 100.0) == [(slice(0, 3), 7), (slice(3, 6), 7), (slice(6, 10), 7)]
    assert model_passes(None, 3, 7, 4, 100.0) == [(slice(0, 3), 7)]
    # like counts share a pass; a lone large count is worth its own pass only when a pass costs few rows
    assert [(m.tolist(), r) for m, r in model_passes(_valid([5, 5, 20, 5], 20), 4, 20, 4, 10.0)] == [
        ([0, 1, 3], 5), ([2], 20)]
    assert [(m.tolist(), r) for m, r in model_passes(_valid([5, 5, 20, 5], 20), 4, 20, 4, 50.0)] == [
        ([0, 1, 3, 2], 20)]


@pytest.mark.slow
@pytest.mark.parametrize("dp", [DPNoise(0.5, 0.7), None], ids=["dp", "non-private"])
def test_training_in_passes_changes_no_model(dp, monkeypatch):
    """Gradients never mix models, so passes of any models give each model the same sums, and the same training."""
    arch = architecture("cnn", (1, 4, 4), 3, channels=[2], hidden=4)
    g = torch.Generator().manual_seed(3)
    X, y = torch.rand(6, 40, 16, generator=g, dtype=torch.float64), torch.randint(0, 3, (6, 40), generator=g)
    recipe, seeds = Recipe(epochs=2, lr=0.1, momentum=0.9, batch_size=6), torch.arange(6)
    seen = []
    monkeypatch.setattr(trainer, "model_passes", lambda v, K, B, *_: seen.append(model_passes(v, K, B, 2, 1.0))
                        or seen[-1])
    split = train(arch, X, y, recipe, seeds, seeds, dp)
    assert all(len(p) >= 3 for p in seen)  # at most 2 models a pass: 3 or more passes a step
    if dp is not None:
        assert any(r < max(rr for _, rr in p) for p in seen for _, r in p)  # some passes cut rows of padding
    monkeypatch.setattr(trainer, "model_passes", lambda v, K, B, *_: [(slice(0, K), B)])
    whole = train(arch, X, y, recipe, seeds, seeds, dp)
    for name in whole:
        torch.testing.assert_close(split[name], whole[name], rtol=1e-9, atol=1e-9)


@pytest.mark.skipif(rng_kernel.library() is None, reason="kernels off or not built")
@pytest.mark.parametrize("ema", [0.0, 0.9])
def test_a_noisy_step_through_the_kernel_is_the_eager_noisy_step(ema, monkeypatch):
    """HeavyBall.step with a step's noise: in the kernel's one pass, or the noise added first and then the eager
    step, the same update to float rounding (weight decay on the weights only, momentum, the moving average)."""
    arch = architecture("mlp", 6, 3, hidden=[8], activation="tanh", l2=0.05)
    recipe = Recipe(epochs=1, lr=0.1, momentum=0.9, batch_size=7, ema=ema)
    state = init_state(arch, torch.arange(3), torch.float32)
    seeds = rng.Keys(torch.arange(3))

    def run(steps: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        layers = [p.clone() for p in to_layers(state)]
        optimizer = trainer.HeavyBall(layers, [i % 2 == 0 for i in range(len(layers))], recipe, arch.l2)
        noise = trainer.Noise(seeds, steps, arch.dense.n_params, torch.float32,
                              lambda flat: unflatten_module_order(arch.dense, flat))
        g = torch.Generator().manual_seed(0)
        for t in range(steps):
            grads = [torch.randn(p.shape, generator=g).transpose(1, 2).contiguous().transpose(1, 2) if p.dim() == 3
                     else torch.randn(p.shape, generator=g) for p in layers]
            optimizer.step(grads, trainer.StepNoise(noise, t, 0.2))
        return optimizer.result(), optimizer.velocity

    fused = run(4)
    monkeypatch.setattr(rng_kernel, "usable", lambda *tensors: None)
    eager = run(4)
    for got, want in [*zip(*[fused[0], eager[0]]), *zip(fused[1], eager[1])]:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


_REUSE = """
import resource, sys, torch
from arena.engine import trainer
if sys.argv[1] == "kept":
    trainer._keep_freed_memory()
faults = []
for _ in range(16):  # a 96 MiB block freed before the next is made: a big pass's temporaries, step after step
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = torch.empty(24 << 20)
    block.fill_(1.0)
    del block
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(*faults[8:])  # the steady state: the first few blocks can find the freed one split by small allocations
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_training_keeps_freed_memory_so_a_steps_temporaries_do_not_fault_their_pages_in_again():
    """Step after step, a block freed and made again is served without a page fault per page (24,576 pages):
    glibc's default maps it afresh every time, and so does ``ARENA_MALLOC=0``. Counted over blocks 9-16: in the
    first few, small allocations made between steps can split the freed block so the next one extends the heap
    (seen: up to 4 of the first 8 faulted in, none after)."""
    def afresh(mode: str, **env: str) -> int:  # of the 8 blocks, how many faulted in every page
        environ = {k: v for k, v in os.environ.items() if k != "ARENA_MALLOC"} | env
        run = subprocess.run([sys.executable, "-c", _REUSE, mode], capture_output=True, text=True, check=True,
                             env=environ)
        return sum(int(f) > 20_000 for f in run.stdout.split())

    assert afresh("default") >= 7
    assert afresh("kept") <= 1
    assert afresh("kept", ARENA_MALLOC="0") >= 7
