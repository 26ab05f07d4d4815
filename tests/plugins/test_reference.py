"""Reference-model attacks on the loss: Ye et al.'s Attack P and Attack R (the linearly interpolated α-quantile of
the non-member losses, as numpy.quantile computes it with the bounds appended) and Watson et al.'s difficulty
calibration, on hand-made losses."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from pydantic import ValidationError

import arena_plugins.reference as reference
from arena.games.membership.pools import ShadowPool
from arena_plugins.reference import LOSS_CAP, ReferenceMIA, calibrated, interpolated_cdf, shared_cdf


def test_the_interpolated_cdf_inverts_numpy_quantile_with_the_bounds_appended() -> None:
    # References 1 and 3 with the bounds: v = (0, 1, 3, 1000) at levels 0, 1/3, 2/3, 1.
    refs, mask = np.array([[1.0, 1.0], [3.0, 1.0]]), np.ones((2, 2), dtype=bool)
    assert np.allclose(interpolated_cdf(refs, mask, np.array([2.0, 1.0])), [0.5, 2 / 3]), "tied references"
    assert interpolated_cdf(refs[:, :1], mask[:, :1], np.array([0.5]))[0] == pytest.approx(1 / 6)
    assert interpolated_cdf(refs[:, :1], mask[:, :1], np.array([2000.0]))[0] == 1.0, "past the cap"
    rng = np.random.default_rng(0)
    refs, mask = rng.exponential(size=(7, 30)), rng.random((7, 30)) < 0.6
    mask[0] = True
    loss = rng.exponential(size=30)
    levels = interpolated_cdf(refs, mask, loss)
    for j in range(30):
        v = np.concatenate([[0.0], refs[mask[:, j], j], [LOSS_CAP]])
        assert np.quantile(v, levels[j]) == pytest.approx(loss[j], rel=1e-9)
        for alpha in (0.05, 0.2, 0.5):  # the test at level α: F(ℓ) ≤ α exactly when ℓ ≤ c_α(x)
            assert (levels[j] <= alpha) == (loss[j] <= np.quantile(v, alpha))
    pop = rng.exponential(size=9)
    assert np.allclose(shared_cdf(pop, loss), interpolated_cdf(np.repeat(pop[:, None], 30, 1),
                                                               np.ones((9, 30), dtype=bool), loss))


def test_the_tests_at_level_alpha_flag_alpha_of_exchangeable_non_members_and_more_members() -> None:
    """Simulated null: each record's target loss is exchangeable with its 64 reference losses (its own
    exponential scale), so Attack R flags it with probability ≈ α; Attack P likewise against 4000 population
    losses of one distribution. Members (loss halved) are flagged more often (power)."""
    rng = np.random.default_rng(7)
    n, K = 4000, 64
    scale = rng.uniform(0.1, 3.0, size=n)
    refs = rng.exponential(size=(K, n)) * scale
    target = rng.exponential(size=n) * scale
    pop, single = rng.exponential(size=4000), rng.exponential(size=n)
    for alpha in (0.05, 0.1):
        slack = 4 * np.sqrt(alpha * (1 - alpha) / n)  # four binomial standard errors
        r_null = interpolated_cdf(refs, np.ones((K, n), dtype=bool), target) <= alpha
        p_null = shared_cdf(pop, single) <= alpha
        assert abs(r_null.mean() - alpha) < slack and abs(p_null.mean() - alpha) < slack, alpha
        assert (interpolated_cdf(refs, np.ones((K, n), dtype=bool), target / 2) <= alpha).mean() > 1.5 * alpha


def test_a_point_without_an_out_reference_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one reference"):
        interpolated_cdf(np.ones((2, 2)), np.array([[True, False], [True, False]]), np.ones(2))


# Hand-made losses: 4 references x 3 challenge points, then 2 population points; reference k trained on
# challenge point j where IN is True (complementary pairs: 0/1 and 2/3).
REF = np.array([[0.2, 1.0, 0.7, 0.9, 1.1], [0.8, 0.3, 0.5, 1.3, 0.6],
                [0.9, 1.2, 0.1, 1.0, 0.8], [0.4, 0.2, 0.9, 0.7, 1.5]])
IN = np.array([[True, False, True], [False, True, False], [True, True, False], [False, False, True]])
TARGET = np.array([0.1, 0.5, 0.6, 0.8, 1.2])  # the target's losses: x0, x1, x2, z0, z1


class Losses:
    """A model whose per-example losses are a table's entries for each query's id (X [n, 1] holds ids 0..4)."""

    def __init__(self, table: np.ndarray) -> None:
        self.table = torch.as_tensor(table)

    def loss(self, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.table[..., X[:, 0].long()]


def hand_view(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    monkeypatch.setattr(reference, "train_pool", lambda view, k, data: ShadowPool(Losses(REF), IN))
    ids = torch.arange(5, dtype=torch.float32)[:, None]
    return SimpleNamespace(challenge_X=ids[:3], challenge_y=torch.zeros(3, dtype=torch.long), population_X=ids[3:],
                           population_y=torch.zeros(2, dtype=torch.long), model=Losses(TARGET), train_size=1)


def test_attack_r_compares_each_loss_with_its_own_out_references(monkeypatch) -> None:
    view = hand_view(monkeypatch)
    # OUT references: x0 → refs 1, 3 (0.8, 0.4); x1 → refs 0, 3 (1.0, 0.2); x2 → refs 1, 2 (0.5, 0.1).
    # v(x0) = (0, 0.4, 0.8, 1000): ℓ = 0.1 at level 0.1/0.4 · 1/3; v(x1) = (0, 0.2, 1.0, 1000): 0.5 at
    # (1 + 0.3/0.8)/3; v(x2) = (0, 0.1, 0.5, 1000): 0.6 at (2 + 0.1/999.5)/3.
    expected = np.array([0.25 / 3, (1 + 0.375) / 3, (2 + 0.1 / 999.5) / 3])
    for fpr in (0.1, 0.5, 0.7):
        guess = ReferenceMIA(ReferenceMIA.Params(variant="attack-r", shadows=4, data="challenge", fpr=fpr)).run(view)
        assert np.allclose(guess.scores, 1 - expected)
        assert guess.decisions.tolist() == (expected <= fpr).tolist()


def test_attack_p_thresholds_every_loss_against_the_targets_population_losses(monkeypatch) -> None:
    view = hand_view(monkeypatch)
    # v = (0, 0.8, 1.2, 1000): 0.1 at 0.125/3, 0.5 at 0.625/3, 0.6 at 0.75/3; c_0.2 = np.quantile(v, 0.2).
    guess = ReferenceMIA(ReferenceMIA.Params(variant="attack-p", fpr=0.2)).run(view)
    assert np.allclose(guess.scores, 1 - np.array([0.125, 0.625, 0.75]) / 3)
    assert guess.decisions.tolist() == (TARGET[:3] <= np.quantile([0, 0.8, 1.2, LOSS_CAP], 0.2)).tolist()


def test_calibration_is_the_out_references_mean_loss_minus_the_targets(monkeypatch) -> None:
    view = hand_view(monkeypatch)
    scores = np.array([(0.8 + 0.4) / 2 - 0.1, (1.0 + 0.2) / 2 - 0.5, (0.5 + 0.1) / 2 - 0.6])
    population = np.array([REF[:, 3].mean() - 0.8, REF[:, 4].mean() - 1.2])  # OUT for every reference
    guess = ReferenceMIA(ReferenceMIA.Params(variant="calibration", shadows=4, data="challenge", fpr=0.5)).run(view)
    assert np.allclose(guess.scores, scores)
    assert guess.decisions.tolist() == (scores > np.quantile(population, 0.5)).tolist()
    assert np.allclose(calibrated(REF[:, :3], ~IN, TARGET[:3]), scores)


def test_population_references_are_out_for_every_challenge_point(monkeypatch) -> None:
    """``data: population``: the references trained on halves of the population, so a challenge point's
    references are all K, a population point's those of the other half."""
    view = hand_view(monkeypatch)
    pop_in = np.array([[True, False], [False, True], [True, False], [False, True]])
    monkeypatch.setattr(reference, "train_pool", lambda view, k, data: ShadowPool(Losses(REF), pop_in))
    guess = ReferenceMIA(ReferenceMIA.Params(variant="calibration", shadows=4, data="population", fpr=0.5)).run(view)
    assert np.allclose(guess.scores, REF[:, :3].mean(axis=0) - TARGET[:3])
    population = np.array([(1.3 + 0.7) / 2 - 0.8, (1.1 + 0.8) / 2 - 1.2])  # z0: refs 1, 3; z1: refs 0, 2
    assert guess.decisions.tolist() == (guess.scores > np.quantile(population, 0.5)).tolist()
    r = ReferenceMIA(ReferenceMIA.Params(variant="attack-r", shadows=4, data="population")).run(view)
    assert np.allclose(r.scores, 1 - interpolated_cdf(REF[:, :3], np.ones((4, 3), dtype=bool), TARGET[:3]))


def test_references_train_on_the_population_by_default(monkeypatch) -> None:
    """Ye et al.'s threat model: with no ``data`` given, the pool is asked for population references (disjoint
    from the challenge), so every challenge point is compared with all K references."""
    asked = []
    pop_in = np.array([[True, False], [False, True], [True, False], [False, True]])

    def pool(view, k, data):
        asked.append(data)
        return ShadowPool(Losses(REF), pop_in)

    view = hand_view(monkeypatch)
    monkeypatch.setattr(reference, "train_pool", pool)
    assert ReferenceMIA.Params().data == "population"
    r = ReferenceMIA(ReferenceMIA.Params(variant="attack-r", shadows=4)).run(view)
    assert asked == ["population"]
    assert np.allclose(r.scores, 1 - interpolated_cdf(REF[:, :3], np.ones((4, 3), dtype=bool), TARGET[:3]))
    view.train_size = 2  # two halves of 2 need 4 population records; the view has 2
    with pytest.raises(ValueError, match="population"):
        ReferenceMIA(ReferenceMIA.Params(variant="attack-r", shadows=4)).run(view)


@pytest.mark.parametrize("bad", [{"variant": "attack-s"}, {"shadows": 3}, {"fpr": 1.0}, {"data": "test"}])
def test_parameters_are_validated(bad) -> None:
    with pytest.raises(ValidationError):
        ReferenceMIA.Params(**bad)
