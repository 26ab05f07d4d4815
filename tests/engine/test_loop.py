"""Dropout is honoured: a module that draws random numbers in training trains on the loop engine, in train mode,
each model's draws from its own train seed (the same alone or batched, in any position), and is queried in eval
mode; the row says which engine ran and why; a module without such layers keeps the batched engine's numbers."""

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from arena.engine import loop
from arena.engine.architecture import Architecture, engine_note, loop_reason, mode_dependent
from arena.engine.ensemble import Ensemble, init_state, logits
from arena.engine.recipe import DPNoise, Recipe
from arena.engine.trainer import choose_engine, train
from arena.pipeline.execute import model_notes
from tests.conftest import architecture
from tests.engine.models import DropoutParams, _Plugin, dropout_mlp

RECIPE = Recipe(epochs=3, lr=0.1, momentum=0.9, batch_size=8)
INIT, TRAIN = torch.tensor([1, 2, 3, 4]), torch.tensor([10, 20, 30, 40])


def _data(K: int = 4, n: int = 40, d: int = 6, seed: int = 0, dtype: torch.dtype = torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(K, n, d, generator=g, dtype=dtype), torch.randint(0, 3, (K, n), generator=g)


def _same(a: dict, b: dict) -> bool:
    return list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)


def test_dropout_0_and_0_9_train_different_models_and_0_0_trains_on_the_batched_engine():
    X, y = _data()
    off, on = dropout_mlp(6, 3, 0.0), dropout_mlp(6, 3, 0.9)
    assert choose_engine(off) == "functional" and loop_reason(off) is None
    assert choose_engine(on) == "loop" and on.template().random == ("drop",)
    a, b = train(off, X, y, RECIPE, INIT, TRAIN), train(on, X, y, RECIPE, INIT, TRAIN)
    for name in a:  # same initialisation, same batches: only the dropout masks differ
        assert not torch.allclose(a[name], b[name]), name
    assert _same(b, train(on, X, y, RECIPE, INIT, TRAIN))  # and the same seed gives the same models


@pytest.mark.parametrize("dp", [None, pytest.param(DPNoise(1.0, 0.8), marks=pytest.mark.slow)],
                         ids=["non-private", "dp-sgd"])
def test_a_dropout_model_trains_bit_for_bit_the_same_alone_or_batched_in_any_position(dp):
    arch = dropout_mlp(6, 3, 0.5)
    X, y = _data()
    batched = train(arch, X, y, RECIPE, INIT, TRAIN, dp)
    order = torch.tensor([2, 0, 3, 1])
    shuffled = train(arch, X[order], y[order], RECIPE, INIT[order], TRAIN[order], dp)
    for k in range(4):
        alone = train(arch, X[k : k + 1], y[k : k + 1], RECIPE, INIT[k : k + 1], TRAIN[k : k + 1], dp)
        assert _same(alone, {n: v[k : k + 1] for n, v in batched.items()})
        pos = int((order == k).nonzero())
        assert _same(alone, {n: v[pos : pos + 1] for n, v in shuffled.items()})
    assert not torch.allclose(batched["out.weight"][0], batched["out.weight"][1])


def test_the_loop_engine_draws_from_the_model_seed_alone_and_leaves_torch_generator_as_it_was():
    arch = dropout_mlp(6, 3, 0.5)
    X, y = _data(K=1)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a = train(arch, X, y, RECIPE, INIT[:1], TRAIN[:1])
    assert torch.equal(torch.get_rng_state(), before)
    torch.manual_seed(456)  # the global generator's state does not reach the model
    assert _same(a, train(arch, X, y, RECIPE, INIT[:1], TRAIN[:1]))
    assert not _same(a, train(arch, X, y, RECIPE, INIT[:1], TRAIN[1:2]))  # another train seed: other masks


def test_dropout_called_in_forward_is_found_by_running_the_module():
    """``F.dropout(h, p, self.training)`` has no layer to see: the template runs the module twice in train mode."""
    arch = dropout_mlp(6, 3, 0.5, functional=True)
    assert arch.template().random == ("forward",)
    assert "its forward" in loop_reason(arch)
    assert choose_engine(arch) == "loop"
    assert dropout_mlp(6, 3, 0.0, functional=True).template().random == ()


def test_asking_for_a_batched_path_for_a_dropout_model_is_refused_naming_why():
    with pytest.raises(ValueError, match="cannot train on the batched engine: the module draws random numbers"):
        choose_engine(dropout_mlp(6, 3, 0.5), "functional")


def test_a_dropout_model_is_queried_in_eval_mode():
    """Queries are deterministic and equal the module's own eval-mode output (dropout off)."""
    arch = dropout_mlp(6, 3, 0.9)
    X, y = _data(K=2)
    state = train(arch, X, y, RECIPE, INIT[:2], TRAIN[:2])
    first, second = logits(arch, state, X[0]), logits(arch, state, X[0])
    assert torch.equal(first, second)
    module = arch.build().eval()
    module.load_state_dict({k: v[1] for k, v in state.items()})
    with torch.no_grad():
        torch.testing.assert_close(first[1], module(X[0]))


def test_the_row_notes_say_the_loop_engine_ran_and_why():
    notes = model_notes(SimpleNamespace(arch=dropout_mlp(6, 3, 0.5)))
    assert len(notes) == 1 and notes[0].startswith("engine: loop (plain PyTorch, one model at a time")
    assert "layers drop" in notes[0] and "own seed" in notes[0]
    assert model_notes(SimpleNamespace(arch=dropout_mlp(6, 3, 0.0))) == []
    assert engine_note(dropout_mlp(6, 3, 0.0)) is None
    assert mode_dependent(dropout_mlp(6, 3, 0.5)) and not mode_dependent(dropout_mlp(6, 3, 0.0))
    assert not mode_dependent(architecture("mlp", 6, 3, hidden=[8]))  # its releases keep their cache keys


class _SequentialDropout(_Plugin):
    """The MLP of ``tests.conftest.architecture('mlp', 6, 3, hidden=[8])``, with Dropout(p) after its activation."""

    name = "mlp-dropout"

    def build(self, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
        return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Dropout(self.params.dropout), nn.Linear(8, n_classes))


def test_dropout_0_keeps_the_batched_engine_bit_for_bit():
    """Dropout(p = 0) draws nothing: the model keeps the ghost plan and trains exactly as without the layer."""
    plain = Architecture(type("P", (_Plugin,), {"name": "mlp-plain", "build": lambda self, s, c: nn.Sequential(
        nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, c))})(DropoutParams()), (6,), 3)
    zero = Architecture(_SequentialDropout(DropoutParams(dropout=0.0)), (6,), 3)
    assert zero.template().ghost is not None and choose_engine(zero) == "functional"
    X, y = _data()
    a, b = train(plain, X, y, RECIPE, INIT, TRAIN), train(zero, X, y, RECIPE, INIT, TRAIN)
    assert all(torch.equal(u, v) for u, v in zip(a.values(), b.values(), strict=True))
    assert choose_engine(Architecture(_SequentialDropout(DropoutParams(dropout=0.3)), (6,), 3)) == "loop"


@pytest.mark.parametrize("dp", [None, pytest.param(DPNoise(1.0, 0.0), marks=pytest.mark.slow),
                                pytest.param(DPNoise(0.3, 0.0), marks=pytest.mark.slow)],
                         ids=["non-private", "dp-sgd-clip-1-no-noise", "dp-sgd-clip-0.3-no-noise"])
def test_the_loop_engine_trains_a_deterministic_model_as_the_batched_engine_does(dp):
    """Same loss, optimiser, batches and clipping: on the MLP (hand-written path) the two engines agree to float64
    rounding without DP (1e-9); with DP-SGD's clipping through Opacus (σ = 0: its noise is the only part that
    differs by design) to 1e-6, the stabiliser Opacus adds to every norm (C / (‖g‖ + 1e-6))."""
    arch = architecture("mlp", 6, 3, hidden=[8], activation="tanh", l2=0.01)
    X, y = _data(dtype=torch.float64)
    recipe = Recipe(epochs=3, lr=0.1, momentum=0.9, batch_size=7, ema=0.5)
    batched = train(arch, X, y, recipe, INIT, TRAIN, dp)
    looped = train(arch, X, y, recipe, INIT, TRAIN, dp, engine="loop")
    tol = 1e-9 if dp is None else 1e-6
    for name in batched:
        torch.testing.assert_close(looped[name], batched[name], rtol=tol, atol=tol)


def test_an_ensemble_in_train_mode_draws_each_model_dropout_from_its_own_seed():
    """Plain-PyTorch defenses train through ``FitTask.ensemble()``: in train mode model k's dropout masks come from
    its train seed alone; in eval mode dropout is off; without seeds train mode is refused."""
    arch = dropout_mlp(6, 3, 0.5)
    X, _ = _data(K=4, n=5)
    state = init_state(arch, INIT)
    both = Ensemble(arch, state, TRAIN)(X)
    alone = Ensemble(arch, {k: v[2:3] for k, v in state.items()}, TRAIN[2:3])(X[2:3])
    assert torch.equal(both[2:3], alone)
    ens = Ensemble(arch, state, TRAIN)
    assert not torch.equal(ens(X), ens(X))  # fresh masks at every call
    ens.eval()
    torch.testing.assert_close(ens(X), logits(arch, state, X))
    with pytest.raises(ValueError, match="needs its train seeds"):
        Ensemble(arch, state)(X)


def test_module_seed_depends_on_the_train_seed_alone():
    assert loop.module_seed(10) == loop.module_seed(10) != loop.module_seed(11)
