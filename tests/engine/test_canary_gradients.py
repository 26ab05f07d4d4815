"""White-box gradient canaries in DP-SGD: an included canary moves its coordinate by exactly −lr·s·C·(steps that
sampled it)/(qN), in both engine paths, the same coordinate in both, and a model trains alike alone or batched."""

import pytest
import torch

from arena.engine import rng
from arena.engine.architecture import Architecture
from arena.engine.batching import steps_and_rate
from arena.engine.instruments import AuditInstruments, GradientCanaries, instrumented
from arena.engine.recipe import DPNoise, Recipe
from arena.engine.trainer import train
from arena_plugins.models import MLP as MLPModel  # noqa: N811 - MLP is a class (an acronym), not a constant
from arena_plugins.models import LogReg

D, C_OUT, H = 6, 3, 5
# built from the model classes directly: the engine needs no plugin registry
MLP = Architecture(MLPModel(MLPModel.Params(hidden=[H], activation="tanh")), (D,), C_OUT)
LOGREG = Architecture(LogReg(LogReg.Params()), (D,), C_OUT)


def _data(K: int, n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(K, n, D, generator=g, dtype=torch.float64)
    X[..., 0] = 0.0  # feature 0 is always zero: the first-layer weights it feeds get no data gradient
    return X, torch.randint(0, C_OUT, (K, n), generator=g)


def _quiet(arch, K: int, signs: list[int]):
    """Canaries on first-layer weights fed by the zero feature: flat index o·D + 0 (module order, weight [out, in])."""
    m = len(signs)
    index = (torch.arange(m) * D).repeat(K, 1)
    sign = torch.tensor(signs, dtype=torch.float64).repeat(K, 1)
    return index, sign


@pytest.mark.parametrize("engine", ["dense", "functional", pytest.param("loop", marks=pytest.mark.slow)])
@pytest.mark.parametrize("batch_size", [8, None], ids=["poisson", "full"])
def test_included_canary_moves_its_coordinate_by_exactly_its_sampled_steps(engine, batch_size):
    K, n, clip, lr = 3, 40, 0.7, 0.3
    recipe = Recipe(epochs=2, lr=lr, momentum=0.0, batch_size=batch_size)
    X, y = _data(K, n)
    init, tr = torch.tensor([1, 2, 3]), torch.tensor([7, 8, 9])
    index, sign = _quiet(MLP, K, [1, -1, 1, -1, 1])
    included = torch.tensor([[1, 1, 0, 1, 0], [0, 1, 1, 1, 1], [1, 0, 1, 0, 1]], dtype=torch.bool)
    plain = DPNoise(clip, 0.0)
    audited = DPNoise(clip, 0.0, GradientCanaries(index, sign, included))
    base = train(MLP, X, y, recipe, init, tr, dp=plain, engine=engine)
    out = train(MLP, X, y, recipe, init, tr, dp=audited, engine=engine)
    steps, q = steps_and_rate(n, recipe)
    keys = rng.Keys(tr)
    sampled = torch.zeros(K, 5)
    for t in range(steps):
        sampled += rng.bernoulli(keys, rng.stream(rng.Purpose.CANARY, t), 5, q) if q < 1 else 1.0
    expected = -lr * clip * sign * (sampled * included) / (q * n)
    W = "layers.0.weight"
    moved = (out[W] - base[W])[:, :5, 0]  # weight [K, out, in]: rows 0..4 of input column 0
    torch.testing.assert_close(moved, expected, rtol=1e-9, atol=1e-12)
    assert (moved[~included] == 0).all() and (moved[included] != 0).sum() >= 8
    for name in out:  # nothing else moves: the canaries' coordinates feed a zero input
        rest = out[name] - base[name]
        if name == W:
            rest = rest.clone()
            rest[:, :5, 0] = 0
        assert rest.abs().max() == 0, name


@pytest.mark.parametrize("arch", [LOGREG, MLP], ids=["logreg", "mlp"])
def test_canaries_land_on_the_same_coordinate_in_both_paths(arch):
    K, n = 2, 30
    X, y = _data(K, n, seed=3)
    X[..., 0] = 1.0
    P = arch.template().n_params
    g = torch.Generator().manual_seed(0)
    index = torch.stack([torch.randperm(P, generator=g)[:12] for _ in range(K)])
    sign = torch.where(torch.rand(K, 12, generator=g) < 0.5, -1.0, 1.0).double()
    canaries = GradientCanaries(index, sign, torch.rand(K, 12, generator=g) < 0.5)
    recipe = Recipe(epochs=2, lr=0.5, batch_size=10)
    args = (arch, X, y, recipe, torch.tensor([1, 2]), torch.tensor([3, 4]))
    dense = train(*args, dp=DPNoise(1.0, 0.8, canaries), engine="dense")
    func = train(*args, dp=DPNoise(1.0, 0.8, canaries), engine="functional")
    plain = train(*args, dp=DPNoise(1.0, 0.8), engine="dense")
    for name in dense:
        torch.testing.assert_close(dense[name], func[name], rtol=1e-7, atol=1e-9)
    assert any((dense[k] - plain[k]).abs().max() > 1e-3 for k in dense)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["dense", "functional", pytest.param("loop", marks=pytest.mark.slow)])
def test_alone_or_batched_with_canaries_and_absent_rows(engine):
    K, n = 4, 30
    X, y = _data(K, n, seed=5)
    P = MLP.template().n_params
    g = torch.Generator().manual_seed(1)
    index = torch.stack([torch.randperm(P, generator=g)[:6] for _ in range(K)])
    sign = torch.ones(K, 6, dtype=torch.float64)
    included = torch.rand(K, 6, generator=g) < 0.5
    present = torch.rand(K, n, generator=g) < 0.8
    recipe = Recipe(epochs=2, lr=0.2, momentum=0.9, batch_size=6)
    init, tr = torch.arange(K) + 10, torch.arange(K) + 20
    batched = train(MLP, X, y, recipe, init, tr,
                    dp=DPNoise(1.0, 1.1, GradientCanaries(index, sign, included), present), engine=engine)
    for k in range(K):
        sl = slice(k, k + 1)
        dp = DPNoise(1.0, 1.1, GradientCanaries(index[sl], sign[sl], included[sl]), present[sl])
        alone = train(MLP, X[sl], y[sl], recipe, init[sl], tr[sl], dp=dp, engine=engine)
        for name in alone:
            torch.testing.assert_close(batched[name][sl], alone[name], rtol=1e-6, atol=1e-8)


def test_an_absent_row_is_as_if_it_were_not_there_in_full_batch():
    """q = 1: absent rows contribute nothing, and the step divides by the public q·n (n rows counted)."""
    X, y = _data(1, 20, seed=2)
    present = torch.ones(1, 20, dtype=torch.bool)
    present[0, 15:] = False
    recipe = Recipe(epochs=3, lr=0.2)
    args = (torch.tensor([1]), torch.tensor([2]))
    masked = train(MLP, X, y, recipe, *args, dp=DPNoise(1.0, 0.0, present=present))
    scaled = Recipe(epochs=3, lr=0.2 * 15 / 20)
    short = train(MLP, X[:, :15], y[:, :15], scaled, *args, dp=DPNoise(1.0, 0.0))
    for name in masked:
        torch.testing.assert_close(masked[name], short[name], rtol=1e-9, atol=1e-12)


def test_instrumented_inserts_into_any_dp_train_call_and_refuses_non_private_training():
    X, y = _data(2, 20)
    index, sign = _quiet(MLP, 2, [1, 1])
    inst = AuditInstruments(GradientCanaries(index, sign, torch.ones(2, 2, dtype=torch.bool)))
    recipe = Recipe(epochs=1, lr=0.1)
    seeds = (torch.tensor([1, 2]), torch.tensor([3, 4]))
    plain = train(MLP, X, y, recipe, *seeds, dp=DPNoise(1.0, 0.0))
    with instrumented(inst):
        out = train(MLP, X, y, recipe, *seeds, dp=DPNoise(1.0, 0.0))
        with pytest.raises(ValueError, match="need DP-SGD"):
            train(MLP, X, y, recipe, *seeds)
    assert inst.calls == 1
    torch.testing.assert_close(out["layers.0.weight"][:, :2, 0] - plain["layers.0.weight"][:, :2, 0],
                               torch.full((2, 2), -0.1 * 1.0 / 20, dtype=torch.float64))
