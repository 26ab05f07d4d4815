"""Language-model training: the per-record loss against a hand computation, DP-SGD's clipped sum against per-record
gradients taken one at a time, seeded reproducibility, and LoRA released merged into the plugin's module."""

from __future__ import annotations

import math

import pytest
import torch

from arena import PAD, Architecture, Model, ModelParams
from arena.contracts.recipe import DPNoise, Recipe
from arena.engine.digests import record_digests
from arena.engine.instruments import AuditInstruments, GradientCanaries, Mechanism, instrumented, state_digest
from arena.engine.lm import LoRA, clipped_sum, example_nll, perplexity, token_logprobs, train_lm
from arena_plugins.lm_models import GPT2, Llama, TinyLMParams

V, L = 11, 6


class Table(torch.nn.Module):
    """Logits that depend only on the current token: row t of a fixed table (a bigram model)."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(V, V, generator=torch.Generator().manual_seed(0)))

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.table[X.long().clamp(min=0)]


def test_example_nll_is_the_mean_over_real_next_tokens() -> None:
    m = Table()
    X = torch.tensor([[1.0, 2, 3, PAD, PAD, PAD], [4.0, 4, 4, 4, 4, 4]])
    logp = torch.log_softmax(m.table.detach(), -1)
    first = -(logp[1, 2] + logp[2, 3]) / 2  # tokens 2 and 3 are predicted; the PAD targets are not
    second = -logp[4, 4]  # five times the same transition
    assert torch.allclose(example_nll(m, X), torch.stack([first, second]).detach())
    lp, targets, keep = token_logprobs(m, X)
    assert lp.shape == (2, L - 1, V) and keep.tolist()[0] == [True, True, False, False, False]
    ppl = perplexity(example_nll(m, X).detach(), X)
    assert ppl == pytest.approx(math.exp(float((2 * first + 5 * second) / 7)))


def test_clipped_sum_equals_per_record_gradients_clipped_one_at_a_time() -> None:
    m = Table()
    X = torch.tensor([[1.0, 2, 3, 4, 5, 6], [7.0, 8, PAD, PAD, PAD, PAD], [3.0, 3, 3, 9, 10, 1]])
    params = {"table": m.table.detach()}
    total, norms = clipped_sum(m, params, X, clip=0.3)
    expected, each = torch.zeros(V, V), []
    for x in X:
        m.zero_grad()
        example_nll(m, x[None]).sum().backward()
        g = m.table.grad.clone()
        each.append(g.norm())
        expected += g * min(1.0, 0.3 / g.norm().item())
    assert torch.allclose(total["table"], expected, atol=1e-6)
    assert torch.allclose(norms, torch.stack(each), atol=1e-6) and (norms > 0.3).all()  # every one was clipped


@pytest.fixture(scope="module")
def arch() -> Architecture:
    return Architecture(GPT2(TinyLMParams(layers=1, dim=16, heads=2)), (L,), V)


def _data() -> torch.Tensor:
    return torch.randint(0, V, (1, 24, L), generator=torch.Generator().manual_seed(1)).float()


@pytest.mark.slow
def test_training_is_seeded_and_lowers_the_loss(arch: Architecture) -> None:
    X = _data()
    recipe = Recipe(epochs=8, lr=0.02, batch_size=8)
    a = train_lm(arch, X, torch.tensor([3]), torch.tensor([4]), recipe)
    b = train_lm(arch, X, torch.tensor([3]), torch.tensor([4]), recipe)
    c = train_lm(arch, X, torch.tensor([3]), torch.tensor([5]), recipe)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a)  # another train seed, other batches
    torch.manual_seed(3)
    init = arch.build()
    from arena import Models

    trained = Models(arch, a).module(0)
    with torch.no_grad():
        assert example_nll(trained, X[0]).mean() < example_nll(init, X[0]).mean() - 0.1


@pytest.mark.parametrize("model", [GPT2, Llama])
def test_lora_is_released_merged_and_changes_only_adapted_weights(model: type) -> None:
    arch = Architecture(model(TinyLMParams(layers=1, dim=16, heads=2)), (L,), V)
    state = train_lm(arch, _data(), torch.tensor([3]), torch.tensor([4]), Recipe(epochs=3, lr=0.05, batch_size=8),
                     lora=LoRA(rank=2, alpha=4.0))
    torch.manual_seed(3)
    init = dict(arch.build().named_parameters())
    assert set(init) <= set(state)
    changed = {n for n, p in init.items() if not torch.allclose(p, state[n][0])}
    assert changed and all(n.rsplit(".", 2)[-2] in {"c_attn", "q_proj", "v_proj"} for n in changed)


def test_dp_training_without_noise_and_with_a_huge_clip_is_the_mean_gradient_step() -> None:
    """σ = 0, C large and q = 1 (one Poisson batch of everything, with probability 1): DP-SGD's update is plain
    full-batch gradient descent, so the two coincide."""
    arch = Architecture(GPT2(TinyLMParams(layers=1, dim=16, heads=2)), (L,), V)
    X = _data()
    recipe = Recipe(epochs=2, lr=0.05, batch_size=None)
    dp = train_lm(arch, X, torch.tensor([3]), torch.tensor([4]), recipe, dp=DPNoise(clip=1e6, noise_multiplier=0.0),
                  optimizer="sgd")
    plain = train_lm(arch, X, torch.tensor([3]), torch.tensor([4]), recipe, optimizer="sgd")
    assert all(torch.allclose(dp[k], plain[k], atol=1e-5) for k in plain)


class _TableModel(Model):
    """``Table`` as a model plugin (a causal language model the engine can build and train)."""

    name = "table"
    Params = ModelParams

    def build(self, input_shape: tuple[int, ...], n_classes: int) -> torch.nn.Module:
        return Table()


def test_an_audits_absent_rows_are_never_trained_on_and_the_call_is_recorded() -> None:
    """q = 1, σ = 0, SGD: a row the audit marks absent contributes nothing, and the step still divides by the public
    q·n (every row counted): the same as training on the present rows alone at lr·15/20. The mechanism run and the
    state returned are recorded for the claim check; non-private training and gradient canaries are refused."""
    arch = Architecture(_TableModel(ModelParams()), (L,), V)
    X = torch.randint(0, V, (1, 20, L), generator=torch.Generator().manual_seed(2)).float()
    present = torch.ones(1, 20, dtype=torch.bool)
    present[0, 15:] = False
    seeds = (torch.tensor([1]), torch.tensor([2]))
    dp = DPNoise(clip=0.5, noise_multiplier=0.0)
    inst = AuditInstruments(present=present, records=record_digests(X[0], torch.zeros(20, dtype=torch.long)))
    with instrumented(inst):
        masked = train_lm(arch, X, *seeds, Recipe(epochs=3, lr=0.2), dp=dp, optimizer="sgd")
        with pytest.raises(ValueError, match="need DP-SGD"):
            train_lm(arch, X, *seeds, Recipe(epochs=3, lr=0.2))
    short = train_lm(arch, X[:, :15], *seeds, Recipe(epochs=3, lr=0.2 * 15 / 20), dp=dp, optimizer="sgd")
    torch.testing.assert_close(masked["table"], short["table"], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(masked["table"], train_lm(arch, X, *seeds, Recipe(epochs=3, lr=0.2), dp=dp,
                                                        optimizer="sgd")["table"])  # the absent rows did matter
    assert inst.calls == 1 and inst.runs == [Mechanism(0.5, 0.0, 1.0, 3, "all")]
    assert inst.returned == [state_digest(masked)]
    one = torch.ones(1, 1)
    canaries = GradientCanaries(torch.zeros(1, 1, dtype=torch.long), one, one.bool())
    with instrumented(AuditInstruments(canaries)), pytest.raises(ValueError, match="input canaries"):
        train_lm(arch, X, *seeds, Recipe(epochs=1, lr=0.2), dp=dp)
