"""QMIA (Bertran et al. 2023): the hinge score, the pinball loss and its minimiser, the level a score reaches among
a record's quantiles, and the attack's decisions against the head at 1 - fpr."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from scipy.stats import norm

from arena_plugins.qmia import QMIA, fit_quantiles, hinge_score, level_of, pinball_loss, quantile_levels


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread, as the arena runs an attack (two threads on a loaded machine cost several times the CPU)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_hinge_score_is_the_true_logit_minus_the_largest_other() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.5], [2.0, 1.0, 0.5], [0.0, 3.0, 3.0]])
    assert hinge_score(logits, torch.tensor([0, 2, 1])).tolist() == [1.0, -1.5, 0.0]
    log_probs = torch.log_softmax(logits, dim=-1)
    assert np.allclose(hinge_score(log_probs, torch.tensor([0, 2, 1])), [1.0, -1.5, 0.0], atol=1e-6)


def test_pinball_loss_on_hand_made_numbers() -> None:
    # errors s - q: 0.5 at level 0.1 (0.1 · 0.5) and -0.5 at level 0.9 ((0.9 - 1) · -0.5): 0.05 each.
    loss = pinball_loss(torch.tensor([[1.0, 2.0]]), torch.tensor([1.5]), torch.tensor([0.1, 0.9]))
    assert loss.item() == pytest.approx(0.1)
    two = pinball_loss(torch.tensor([[0.0], [0.0]]), torch.tensor([1.0, -1.0]), torch.tensor([0.25]))
    assert two.item() == pytest.approx((0.25 * 1 + 0.75 * 1) / 2), "mean over records"


def test_levels_run_from_zero_to_top_and_hold_the_decision_level() -> None:
    levels = quantile_levels(5, 0.999, 0.05)
    assert levels[0] == 0.0 and levels[-1] == pytest.approx(0.999) and 0.95 in levels
    assert np.all(np.diff(levels) > 0) and len(levels) == 6
    assert len(quantile_levels(5, 0.999, 0.001)) == 5, "1 - fpr already on the grid"


def test_level_of_interpolates_between_heads_and_keeps_order_past_the_top() -> None:
    q, levels = np.array([[0.0, 1.0, 2.0]] * 5), np.array([0.0, 0.5, 0.9])
    out = level_of(np.array([0.5, 1.5, -1.0, 2.0, 3.0]), q, levels)
    assert np.allclose(out[:4], [0.25, 0.7, 0.0, 0.9])
    assert out[4] == pytest.approx(0.9 + 0.1 * 0.5), "one cell width past the top head: m / (1 + m) = 1/2"
    rng = np.random.default_rng(0)
    q = np.sort(rng.normal(size=(200, 6)), axis=1)
    levels = np.array([0.0, 0.3, 0.6, 0.9, 0.99, 0.999])
    s = rng.normal(size=200) * 2
    out = level_of(s, q, levels)
    for j in range(1, 6):  # thresholding the level at a head's level is that head's test
        assert np.array_equal(out >= levels[j], s >= q[:, j])
    assert np.all(out <= 1.0)
    far = level_of(2.0 + np.logspace(-3, 6, 50), np.array([[0.0, 1.0, 2.0]] * 50), np.array([0.0, 0.5, 0.9]))
    assert np.all(np.diff(far) > 0) and np.all(far < 1.0), "past the top head, farther is higher"


@pytest.mark.slow
def test_the_fitted_heads_are_the_conditional_quantiles() -> None:
    """s = 2x + N(0, 0.3²) given x: head α must be near 2x + 0.3 Φ⁻¹(α), a threshold that follows the record."""
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(3000, 1, generator=gen)
    s = (2 * x[:, 0] + 0.3 * torch.randn(3000, generator=gen)).double().numpy()
    levels = np.array([0.1, 0.5, 0.9])
    net = fit_quantiles(x, s, levels, QMIA.Params(epochs=300, hidden=16, lr=3e-2), seed=0)
    grid = torch.linspace(0.1, 0.9, 9)[:, None]
    with torch.no_grad():
        q = net(grid).double().numpy()
    expected = 2 * grid.double().numpy() + 0.3 * norm.ppf(levels)[None, :]
    assert np.abs(q - expected).max() < 0.1
    assert np.mean(s[:, None] <= net(x).detach().double().numpy(), axis=0) == pytest.approx(levels, abs=0.02)


class Scores:
    """A target of 2 classes whose hinge score on a record [u, z] is 4u + Φ⁻¹(frac(1000 z)): a trend the
    regressor can learn from u, plus a part no small regressor can predict from z (the target's own
    idiosyncrasy, as a real model's score has)."""

    def log_proba(self, X: torch.Tensor) -> torch.Tensor:
        frac = torch.remainder(X[:, 1].double() * 1000, 1.0).clamp(1e-6, 1 - 1e-6)
        s = 4 * X[:, 0].double() + torch.special.ndtri(frac)
        return torch.stack([s, torch.zeros(len(X), dtype=torch.float64)], dim=-1)


def scored_records(n: int, shift: float, gen: torch.Generator) -> torch.Tensor:
    """Records whose score is 4u + N(shift, 1): z encodes the noise through its fractional digits."""
    u = torch.rand(n, generator=gen, dtype=torch.float64)
    e = torch.randn(n, generator=gen, dtype=torch.float64) + shift
    k = torch.randint(0, 1000, (n,), generator=gen).double()
    return torch.stack([u, (k + torch.special.ndtr(e)) / 1000], dim=1).float()


@pytest.mark.slow
def test_attack_decides_by_the_head_at_one_minus_fpr_and_finds_shifted_members() -> None:
    """Population scores are N(4u, 1) given the record; members score 1.5 higher. A global threshold is
    confused by the trend in u, the per-record quantiles are not."""
    gen = torch.Generator().manual_seed(1)
    pop, members, others = (scored_records(n, shift, gen) for n, shift in ((1500, 0.0), (200, 1.5), (200, 0.0)))
    view = SimpleNamespace(population_X=pop, population_y=torch.zeros(1500, dtype=torch.long),
                           challenge_X=torch.cat([members, others]), challenge_y=torch.zeros(400, dtype=torch.long),
                           n_classes=2, seed=3, model=Scores())
    guess = QMIA(QMIA.Params(epochs=200, hidden=16, lr=3e-2, fpr=0.1, use_label=False)).run(view)
    s = hinge_score(Scores().log_proba(view.challenge_X), view.challenge_y)
    is_member = np.arange(400) < 200
    assert guess.decisions[~is_member].mean() == pytest.approx(0.1, abs=0.06), "the head's FPR is 1 - α"
    assert guess.decisions[is_member].mean() > 0.4
    assert np.array_equal(guess.decisions, guess.scores >= 0.9), "the level reached is the head test"
    top = np.argsort(-guess.scores)[:40]
    assert is_member[top].mean() > is_member[np.argsort(-s)[:40]].mean(), "beats the global threshold on s"


@pytest.mark.parametrize("bad", [{"levels": 1}, {"top": 1.0}, {"top": 0.4}, {"fpr": 0.0}, {"epochs": 0},
                                 {"lr": 0.0}, {"hidden": 0}])
def test_parameters_are_validated(bad) -> None:
    with pytest.raises(ValidationError):
        QMIA.Params(**bad)
