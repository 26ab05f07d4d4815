"""The batched engine against the loop engine (the reference: plain PyTorch, one model at a time, Opacus for DP-SGD)
on the digits MLP and CNN (the built-in ``mlp`` and ``cnn`` models), 16 models each, and Opacus' accountants
against the arena's.

* Deterministic computation (non-private minibatch SGD; DP-SGD's clipping with σ = 0): the same minibatches, the
  same loss and update, so the same models to float32 rounding.
* DP-SGD: Opacus draws its noise from its own generator (seeded by each model's train seed), the batched engine from
  the counter RNG, so single models differ; the engines must agree on what a tournament measures, utility and LiRA
  AUC, within their sampling tolerance (``TOLERANCE`` below).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from arena.engine.architecture import Architecture, batched_problem, engine_note, opacus_mode, runs_on_loop
from arena.engine.batching import steps_and_rate
from arena.engine.ensemble import logits
from arena.engine.loop import opacus_epsilon
from arena.engine.recipe import DPNoise, Recipe
from arena.engine.trainer import choose_engine, train
from arena.privacy.accounting import calibrate_noise, epsilon
from plugins.membership import likelihood_ratio, true_class_log_odds
from tests.conftest import architecture
from tests.engine.models import dropout_mlp

pytest.importorskip("opacus")

K = 16
"""Models per engine (8 complementary pairs: each challenge point is a member of exactly 8)."""
N, T = 256, 400
"""Challenge points (each model trains on half of them, 128) and test records (for utility)."""
INIT, TRAIN = torch.arange(K) + 100, torch.arange(K) + 200

MODELS = {
    "mlp": lambda: architecture("mlp", (1, 8, 8), 10, hidden=[64]),
    "cnn": lambda: architecture("cnn", (1, 8, 8), 10, channels=[8, 16], hidden=32, norm="group", groups=4),
}


def _digits() -> tuple[torch.Tensor, ...]:
    """(X, y of all the digits, membership [K, N], challenge indices [N], test indices [T], and each model's training
    set X [K, N/2, 64], y [K, N/2]): model
    2j trains on a random half of the challenge points, model 2j + 1 on the other half."""
    from sklearn.datasets import load_digits

    d = load_digits()
    X, y = torch.tensor(d.data / 16.0, dtype=torch.float32), torch.tensor(d.target)
    perm = torch.randperm(len(X), generator=torch.Generator().manual_seed(0))
    pool, test = perm[:N], perm[N:N + T]
    g = torch.Generator().manual_seed(1)
    halves = [torch.randperm(N, generator=g) < N // 2 for _ in range(K // 2)]
    member = torch.stack([m for h in halves for m in (h, ~h)])
    idx = torch.stack([pool[m] for m in member])
    return X, y, member, pool, test, X[idx], y[idx]


@pytest.fixture(scope="module")
def digits():
    return _digits()


@pytest.fixture(autouse=True)
def one_thread():
    """One thread, as a matchup trains (many threads on small tensors of a shared machine cost 10-50× the CPU)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _accuracy(arch: Architecture, state: dict, X: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    return (logits(arch, state, X.expand(K, -1, -1)).argmax(-1) == y).float().mean(1).numpy()


def _auc(member: np.ndarray, score: np.ndarray) -> float:
    """The Mann-Whitney AUC (ties count a half)."""
    pos, neg = score[member], score[~member]
    return float(((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum())
                 / (len(pos) * len(neg)))


def _lira_aucs(arch: Architecture, state: dict, X: torch.Tensor, y: torch.Tensor, member: torch.Tensor) -> np.ndarray:
    """Online LiRA (fixed variance: 15 shadows) on each model in turn as the target, the other 15 as its shadows:
    the AUC of each target's scores over the N challenge points."""
    phi = true_class_log_odds(logits(arch, state, X.expand(K, -1, -1)), y.expand(K, -1))
    m = member.numpy()
    aucs = []
    for k in range(K):
        others = np.arange(K) != k
        aucs.append(_auc(m[k], likelihood_ratio(phi[others], m[others], phi[k], True)))
    return np.array(aucs)


def _hanley_mcneil_sd(n_in: int, n_out: int) -> float:
    """Standard deviation of an AUC of 0.5 from n_in members and n_out non-members (Hanley & McNeil 1982)."""
    return math.sqrt((n_in + n_out + 1) / (12 * n_in * n_out))


TOLERANCE = {
    "accuracy": 4 * math.sqrt(2 / K) * math.sqrt(0.25 / T),
    "auc": 4 * math.sqrt(2 / K) * _hanley_mcneil_sd(N // 2, N // 2),
}
"""Four standard deviations of the difference of two engines' means over K models: a model's accuracy on T test
records has binomial sd at most sqrt(1/4T) (0.025 at T = 400); a target's LiRA AUC over N/2 members and N/2
non-members has sd ~ 0.036 at 0.5 (Hanley-McNeil); means over K = 16 models, difference of two engines (√2):
0.035 in accuracy, 0.051 in AUC. (Both engines share the data, initialisations and Poisson batches, so their
difference comes from the noise alone and is smaller than two independent draws'.)"""


@pytest.mark.slow
@pytest.mark.parametrize("model", list(MODELS))
def test_deterministic_training_is_identical_on_both_engines(digits, model):
    """Non-private minibatch SGD (same shuffles) and DP-SGD with σ = 0 (same Poisson batches, clipping through
    Opacus' ghost clipping / per-sample hooks on the loop): 16 models' parameters agree within float32 rounding
    (rtol = atol = 1e-5; the largest seen: 2e-7 non-private, ~1e-6 with Opacus' 1e-6 norm stabiliser), and so do
    their logits on the test records (atol 1e-4)."""
    X, y, member, pool, test, Xk, yk = digits
    arch = MODELS[model]()
    for dp, recipe in ((None, Recipe(epochs=3, lr=0.1, momentum=0.9, batch_size=32)),
                       (DPNoise(1.0, 0.0), Recipe(epochs=2, lr=0.5, momentum=0.9, batch_size=32))):
        batched = train(arch, Xk, yk, recipe, INIT, TRAIN, dp)
        looped = train(arch, Xk, yk, recipe, INIT, TRAIN, dp, engine="loop")
        assert choose_engine(arch) != "loop"
        for name in batched:
            torch.testing.assert_close(looped[name], batched[name], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(logits(arch, looped, X[test].expand(K, -1, -1)),
                                   logits(arch, batched, X[test].expand(K, -1, -1)), rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("model", list(MODELS))
def test_dp_sgd_utility_and_lira_auc_agree_within_sampling_tolerance(digits, model):
    """DP-SGD at ε = 50 (δ = 1e-4, q = 0.25, 80 steps: σ ≈ 0.6, a LiRA signal well above 0.5 on the MLP): mean
    test accuracy and mean LiRA AUC over 16 models of the batched engine and of the loop engine (Opacus) differ by
    less than ``TOLERANCE``; the noise really differs (no two models equal)."""
    X, y, member, pool, test, Xk, yk = digits
    arch = MODELS[model]()
    recipe = Recipe(epochs=20, lr=0.5, momentum=0.9, batch_size=32)
    steps, q = steps_and_rate(N // 2, recipe)
    sigma, _ = calibrate_noise(50.0, q, steps, 1e-4)
    dp = DPNoise(1.0, sigma)
    batched = train(arch, Xk, yk, recipe, INIT, TRAIN, dp)
    looped = train(arch, Xk, yk, recipe, INIT, TRAIN, dp, engine="loop")
    assert not any(torch.allclose(batched[n], looped[n]) for n in batched)
    acc = [_accuracy(arch, s, X[test], y[test]) for s in (batched, looped)]
    auc = [_lira_aucs(arch, s, X[pool], y[pool], member) for s in (batched, looped)]
    assert abs(acc[0].mean() - acc[1].mean()) < TOLERANCE["accuracy"], (acc[0].mean(), acc[1].mean())
    assert abs(auc[0].mean() - auc[1].mean()) < TOLERANCE["auc"], (auc[0].mean(), auc[1].mean())
    assert min(acc[0].mean(), acc[1].mean()) > 0.3  # both learnt (chance: 0.1)


ACCOUNTED = [(1.0, 0.01, 1000, 1e-5), (4.0, 0.064, 160, 1e-5), (8.0, 0.1, 100, 1e-5), (0.5, 1.0, 5, 1e-5)]


@pytest.mark.slow
@pytest.mark.parametrize("target,q,steps,delta", ACCOUNTED)
def test_opacus_accountants_agree_with_the_arena_s(target, q, steps, delta):
    """For the σ the arena calibrates (its RDP accountant, dp_accounting), Opacus' own accountants on the same
    (σ, q, T, δ): its RDP within 0.5 % of the arena's RDP ε (measured: at most 0.06 %, Opacus the tighter at
    q = 0.1 by its finer orders, equal elsewhere to 1e-4); its PRV ε within [PLD, PLD + 0.02 + 1 %] of the
    arena's PLD ε (measured: 0.010-0.012 above, its eps_error of 0.01: the arena's PLD is the tighter), and both
    below the RDP figures. The claim the arena records is its own RDP ε, never above the target."""
    sigma, claimed = calibrate_noise(target, q, steps, delta, "rdp")
    assert claimed <= target
    ours_rdp, ours_pld = epsilon(sigma, q, steps, delta, "rdp"), epsilon(sigma, q, steps, delta, "pld")
    theirs_rdp = opacus_epsilon(sigma, q, steps, delta, "rdp")
    theirs_prv = opacus_epsilon(sigma, q, steps, delta, "prv")
    assert abs(theirs_rdp - ours_rdp) <= 0.005 * ours_rdp, (theirs_rdp, ours_rdp)
    assert ours_pld <= theirs_prv <= ours_pld * 1.01 + 0.02, (theirs_prv, ours_pld)
    assert theirs_prv < theirs_rdp and ours_pld < ours_rdp


def test_the_track_engine_chooses_the_path_and_refuses_batched_for_a_dropout_model():
    mlp = architecture("mlp", 6, 3, hidden=[8])
    loop_mlp = Architecture(mlp.model, mlp.input_shape, mlp.n_classes, engine="loop")
    batched_mlp = Architecture(mlp.model, mlp.input_shape, mlp.n_classes, engine="batched")
    assert choose_engine(mlp) == "dense" and choose_engine(batched_mlp) == "dense"
    assert choose_engine(loop_mlp) == "loop" and runs_on_loop(loop_mlp) and not runs_on_loop(mlp)
    # keyed apart unless auto: caches never mix the engines' models
    assert mlp.identity() == {k: v for k, v in loop_mlp.identity().items() if k != "engine"}
    assert loop_mlp.identity()["engine"] == "loop" and mlp != loop_mlp != batched_mlp
    drop = dropout_mlp(6, 3, 0.5)
    forced = Architecture(drop.model, drop.input_shape, drop.n_classes, engine="batched")
    assert batched_problem(forced) and "draws random numbers" in batched_problem(forced)
    with pytest.raises(ValueError, match="batched engine cannot train"):
        choose_engine(forced)
    assert batched_problem(drop) is None and choose_engine(drop) == "loop"


def test_the_row_note_names_the_engine_why_and_how_opacus_runs():
    mlp = architecture("mlp", 6, 3, hidden=[8])
    assert engine_note(mlp) is None and engine_note(mlp, dp=True) is None
    loop_mlp = Architecture(mlp.model, mlp.input_shape, mlp.n_classes, engine="loop")
    note = engine_note(loop_mlp, dp=True)
    assert note.startswith("engine: loop (plain PyTorch, one model at a time")
    assert "because the track asks for it (engine: loop)" in note
    assert 'DP-SGD through Opacus' in note and 'grad_sample_mode="ghost"' in note
    assert "Opacus" not in engine_note(loop_mlp)
    batched = Architecture(mlp.model, mlp.input_shape, mlp.n_classes, engine="batched")
    assert engine_note(batched).startswith("engine: batched")
    assert "draws random numbers" in engine_note(dropout_mlp(6, 3, 0.5), dp=True)
    assert opacus_mode(architecture("cnn", (1, 8, 8), 10, channels=[4], hidden=8, norm="group", groups=2)) == "ghost"


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("model", list(MODELS))
def test_on_cuda_the_loop_engine_trains_as_the_batched_engine_does(digits, model):
    """On a GPU (the issue's CUDA check): the loop engine (plain PyTorch, Opacus with σ = 0 for DP-SGD) and the
    batched engine on the same 16 models agree as on the CPU, and the loop engine's models on CUDA match its models
    on the CPU (float32 rounding of different kernels: rtol = atol = 1e-4)."""
    X, y, member, pool, test, Xk, yk = digits
    arch = MODELS[model]()
    on = {k: v.cuda() for k, v in {"X": Xk, "y": yk, "init": INIT, "train": TRAIN}.items()}
    for dp, recipe in ((None, Recipe(epochs=3, lr=0.1, momentum=0.9, batch_size=32)),
                       (DPNoise(1.0, 0.0), Recipe(epochs=2, lr=0.5, momentum=0.9, batch_size=32))):
        args = (arch, on["X"], on["y"], recipe, on["init"], on["train"], dp)
        looped, batched = train(*args, engine="loop"), train(*args)
        cpu = train(arch, Xk, yk, recipe, INIT, TRAIN, dp, engine="loop")
        for name in batched:
            assert looped[name].is_cuda
            torch.testing.assert_close(looped[name], batched[name], rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(looped[name].cpu(), cpu[name], rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_empty_poisson_batches_take_the_noise_alone_on_the_loop_engine():
    """q = 0.1 on 10 records: about a third of the steps sample nothing. Opacus is not run on an empty batch; the
    step is the noise alone (σ = 0 here: the momentum's step), as on the batched engine, to Opacus' 1e-6 norm
    stabiliser (tolerance 1e-5 at float64)."""
    arch = architecture("mlp", 6, 3, hidden=[8])
    g = torch.Generator().manual_seed(0)
    X, y = torch.randn(3, 10, 6, generator=g, dtype=torch.float64), torch.randint(0, 3, (3, 10), generator=g)
    recipe = Recipe(epochs=3, lr=0.1, momentum=0.9, batch_size=1, ema=0.3)
    args = (arch, X, y, recipe, torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6]), DPNoise(0.5, 0.0))
    batched, looped = train(*args), train(*args, engine="loop")
    for name in batched:
        torch.testing.assert_close(looped[name], batched[name], rtol=1e-5, atol=1e-5)
