"""RMIA (Zarifzadeh et al. 2024): scores on hand-made outputs against the paper's formulas, the offline ``a``
approximation and the online fit of a, ties broken by the likelihood ratio, γ, parameter checks, and a real game
against an overfit model."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from pydantic import ValidationError

import arena_plugins.rmia as rmia
from arena import fit_a, offline_log_prob, rmia_counts, rmia_scores
from arena.contracts.spec import PluginRef
from arena.engine.recipe import Recipe
from arena.games.membership import MembershipGame, MembershipGameSpec
from arena.games.membership.pools import ShadowPool
from arena.pipeline.plan import load_dataset
from arena.pipeline.procedure import TrainingProcedure
from arena.pipeline.store import TensorCache
from arena_plugins.defenses import NonPrivate
from arena_plugins.membership import LiRA, ThresholdMIA
from arena_plugins.rmia import RMIA
from tests.conftest import architecture

# Hand-made probabilities of the true label (class 0 of 2) for two challenge points x0, x1 and three population
# points z0, z1, z2: under the target θ and under two reference models. Reference 0 trained on x0, reference 1
# on x1 (a complementary pair); no reference trained on a population point.
TARGET_X, TARGET_Z = [0.9, 0.6], [0.5, 0.8, 0.3]
REF_X = [[0.8, 0.5], [0.4, 0.7]]
REF_Z = [[0.5, 0.6, 0.2], [0.3, 0.4, 0.4]]
IN = np.array([[True, False], [False, True]])


def logits(p: list[float]) -> torch.Tensor:
    """Two-class logits whose softmax gives probability p to class 0."""
    p = torch.tensor(p, dtype=torch.float64)
    return torch.stack([torch.log(p), torch.log1p(-p)], dim=-1)


class Lookup:
    """A model whose outputs are the table's row for each query's id (X [n, 1] holds the ids 0..4: x0, x1, z0-z2)."""

    def __init__(self, table: torch.Tensor) -> None:
        self.table = table  # [K, 5, 2]

    def logits(self, X: torch.Tensor) -> torch.Tensor:
        return self.table[:, X[:, 0].long()]

    def log_proba(self, X: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.logits(X)[0], dim=-1)


def hand_view(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    refs = torch.stack([torch.cat([logits(x), logits(z)]) for x, z in zip(REF_X, REF_Z)])
    monkeypatch.setattr(rmia, "train_pool", lambda view, k: ShadowPool(Lookup(refs), IN))
    ids = torch.arange(5, dtype=torch.float32)[:, None]
    return SimpleNamespace(challenge_X=ids[:2], challenge_y=torch.zeros(2, dtype=torch.long),
                           population_X=ids[2:], population_y=torch.zeros(3, dtype=torch.long),
                           model=Lookup(logits(TARGET_X + TARGET_Z)[None]), seed=0)


def hand_lr(variant: str, a: float) -> np.ndarray:
    """LR(x, z) [2, 3] by the paper's formulas, written out on the numbers above."""
    if variant == "online":  # Pr(x) = ½(Pr_IN + Pr_OUT): x0 is IN for reference 0, x1 for reference 1
        pr_x = [(0.8 + 0.4) / 2, (0.7 + 0.5) / 2]
        pr_z_out = [(0.5 + 0.3) / 2, (0.6 + 0.4) / 2, (0.2 + 0.4) / 2]
    else:  # Pr(x) = ½((1 + a) Pr_OUT(x) + (1 - a)); x0 is OUT for reference 1, x1 for reference 0
        pr_x = [((1 + a) * 0.4 + (1 - a)) / 2, ((1 + a) * 0.5 + (1 - a)) / 2]
        pr_z_out = [0.5, 0.6, 0.2]  # one reference per pair: reference 0
    pr_z = [((1 + a) * p + (1 - a)) / 2 for p in pr_z_out]  # population points are outside every reference
    ratio_x = np.array(TARGET_X) / np.array(pr_x)
    ratio_z = np.array(TARGET_Z) / np.array(pr_z)
    return ratio_x[:, None] / ratio_z[None, :]


@pytest.mark.parametrize("variant", ["online", "offline"])
@pytest.mark.parametrize("a", [0.0, 0.3, 1.0])
def test_scores_are_the_fraction_of_population_points_with_lr_at_least_gamma(monkeypatch, variant, a) -> None:
    view = hand_view(monkeypatch)
    lr = hand_lr(variant, a)
    # γ just below and just above every LR value pins each LR(x, z) down: a wrong formula moves some of them.
    for gamma in sorted({g for v in lr.ravel() for g in (v * (1 - 1e-9), v * (1 + 1e-9))}):
        guess = RMIA(RMIA.Params(shadows=2, variant=variant, a=a, gamma=gamma)).run(view)
        counts = np.floor(guess.scores * (3 + 1) + 1e-12)  # the score's integer part is the paper's count
        assert np.array_equal(counts, (lr >= gamma).sum(axis=1)), f"γ = {gamma}"
        assert guess.references == 3


def test_online_scores_on_the_hand_made_example(monkeypatch) -> None:
    """LR(x0, ·) = (1.5 / (0.5/0.55), 1.5 / (0.8/0.625), 1.5 / (0.3/0.475)) ≈ (1.65, 1.17, 2.38) and
    LR(x1, ·) ≈ (1.10, 0.78, 1.58) at a = 0.5 (Pr(x0) = Pr(x1) = 0.6; Pr(z) = ½(1.5 Pr_OUT(z) + 0.5))."""
    view = hand_view(monkeypatch)
    assert np.allclose(hand_lr("online", 0.5), [[1.65, 1.171875, 2.375], [1.1, 0.78125, 1.5833333]])
    counts = {g: np.floor(RMIA(RMIA.Params(shadows=2, a=0.5, gamma=g)).run(view).scores * 4)
              for g in (1.0, 1.6, 2.0)}
    assert counts[1.0].tolist() == [3, 2] and counts[1.6].tolist() == [2, 0] and counts[2.0].tolist() == [1, 0]


def test_online_a_is_fitted_on_the_pool_so_x_and_z_are_normalised_alike(monkeypatch) -> None:
    """Pr_IN ≈ a·Pr_OUT + (1 − a) by least squares through (1, 1): x0 (IN 0.8, OUT 0.4) and x1 (IN 0.7, OUT 0.5)
    give a = (0.6·0.2 + 0.5·0.3)/(0.6² + 0.5²) = 0.27/0.61; online with a = None uses it for every z."""
    assert fit_a(np.log([0.8, 0.7]), np.log([0.4, 0.5])) == pytest.approx(0.27 / 0.61, rel=1e-12)
    assert fit_a(np.log([0.3]), np.log([0.3])) == 1.0 and fit_a(np.log([1.0]), np.log([0.2])) == 0.0
    assert fit_a(np.log([0.5]), np.log([1.0])) == 1.0  # no OUT gap: nothing to fit
    view = hand_view(monkeypatch)
    fitted = RMIA(RMIA.Params(shadows=2)).run(view).scores
    assert np.array_equal(fitted, RMIA(RMIA.Params(shadows=2, a=0.27 / 0.61)).run(view).scores)


def test_ties_are_broken_by_the_likelihood_ratio() -> None:
    """(c + u)/(|Z| + 1): between z₍c₎ and z₍c₊₁₎ u is linear, so log ratio 0.5 between 0 and 1 scores
    (1 + 0.5)/4; below every z, exp(t − z₍₁₎); above, 1 − exp(z₍₃₎ − t). Strictly increasing and continuous."""
    z = np.array([1.0, 0.0, 2.0])
    s = rmia_scores(np.array([0.5, -1.0, 3.0, 2.0, 0.0]), z, 1.0)
    assert np.allclose(s, [1.5 / 4, math.exp(-1) / 4, (3 + 1 - math.exp(-1)) / 4, 3 / 4, 1 / 4])
    t = np.linspace(-5, 8, 2001)
    s = rmia_scores(t, z, 1.0)
    assert np.all(np.diff(s) > 0) and np.max(np.abs(np.diff(s))) < 0.01 and s.min() > 0 and s.max() < 1
    assert np.array_equal(np.floor(s * 4 + 1e-12), rmia_counts(t, z, 1.0))


def test_no_more_than_one_in_z_of_non_members_share_the_top_score() -> None:
    """Members' and non-members' ratios differ (shifted normals): the paper's fraction piles every ratio above the
    population's largest at 1.0; the continuous score leaves no two non-members tied."""
    rng = np.random.default_rng(3)
    z = rng.normal(size=97)
    nonmembers, members = rng.normal(size=1000), rng.normal(size=1000) + 2.0
    counts = rmia_counts(nonmembers, z, 1.0)
    assert np.sum(counts == counts.max()) > 1000 / 97  # the tie the count makes
    s = rmia_scores(np.r_[members, nonmembers], z, 1.0)
    top = s[1000:]
    assert np.sum(top == top.max()) <= max(1, 1000 // 97)
    assert len(np.unique(s)) == 2000


def test_offline_a_interpolates_between_a_constant_and_the_out_mean() -> None:
    p_out = np.array([1e-30, 0.2, 0.5, 1.0])
    for a in (0.0, 0.3, 1.0):
        assert np.allclose(np.exp(offline_log_prob(np.log(p_out), a)), ((1 + a) * p_out + (1 - a)) / 2, rtol=1e-12)
    assert np.allclose(offline_log_prob(np.log(p_out), 1.0), np.log(p_out)), "a = 1: Pr(x) = Pr_OUT(x)"
    assert np.allclose(offline_log_prob(np.log(p_out), 0.0), np.log((p_out + 1) / 2)), "a = 0: Pr_IN = 1"


def test_offline_uses_only_out_references_and_changes_with_a(monkeypatch) -> None:
    view = hand_view(monkeypatch)
    # a = 1: Pr(x) = Pr_OUT(x), so x0's ratio is 0.9 / 0.4 whatever reference 0 (which trained on x0) says.
    gamma = hand_lr("offline", 1.0)[0, 0]
    assert gamma == pytest.approx((0.9 / 0.4) / (0.5 / 0.5))
    assert RMIA(RMIA.Params(shadows=2, variant="offline", a=1.0, gamma=gamma * (1 - 1e-9))).run(view).scores[0] > \
        RMIA(RMIA.Params(shadows=2, variant="offline", a=1.0, gamma=gamma * (1 + 1e-9))).run(view).scores[0]
    # Moving a moves the normaliser of x and z differently, and so the scores.
    gammas = (0.8, 1.0, 1.2, 1.5)
    low, high = ([RMIA(RMIA.Params(shadows=2, variant="offline", a=a, gamma=g)).run(view).scores for g in gammas]
                 for a in (0.0, 1.0))
    assert any(not np.array_equal(x, y) for x, y in zip(low, high))


def test_scores_fall_as_gamma_rises_and_rise_with_the_ratio() -> None:
    rng = np.random.default_rng(0)
    x, z = rng.normal(size=50), rng.normal(size=200)
    previous = np.ones(50)
    for gamma in (0.25, 0.5, 1.0, 2.0, 4.0, 8.0):
        scores = rmia_scores(x, z, gamma)
        counts = (x[:, None] - z[None, :] >= math.log(gamma)).sum(1)
        assert np.all(scores <= previous) and np.array_equal(rmia_counts(x, z, gamma), counts)
        previous = scores
    order = np.argsort(x)
    assert np.all(np.diff(rmia_scores(x, z, 1.0)[order]) >= 0), "monotone in Pr(x|θ)/Pr(x)"


def test_the_hard_threshold_is_the_population_ratios_quantile(monkeypatch) -> None:
    """Population log ratios at a = 0.5 (online): log(0.3/0.475) < log(0.5/0.55) < log(0.8/0.625); x0's ratio is
    0.9/0.6 = 1.5, x1's 0.6/0.6 = 1. At fpr ½ the threshold is the median, log(0.5/0.55) < 0: both are members.
    At fpr ⅓ it is the ⅔ quantile, a third of the way from log(0.5/0.55) to log(0.8/0.625): 0.019 > log 1."""
    view = hand_view(monkeypatch)
    half = RMIA(RMIA.Params(shadows=2, a=0.5, gamma=1.0, fpr=0.5)).run(view)
    assert half.decisions.tolist() == [True, True]
    third = RMIA(RMIA.Params(shadows=2, a=0.5, gamma=1.0, fpr=1 / 3)).run(view)
    lo, hi = math.log(0.5 / 0.55), math.log(0.8 / 0.625)
    assert lo + (hi - lo) / 3 == pytest.approx(0.0188, abs=1e-4) and third.decisions.tolist() == [True, False]


@pytest.mark.parametrize("bad", [{"shadows": 3}, {"shadows": 0}, {"variant": "both"}, {"gamma": 0.0},
                                 {"gamma": math.inf}, {"a": 1.5}, {"a": -0.1}, {"z": 0}, {"fpr": 1.0},
                                 {"temperature": 0.0}])
def test_parameters_are_validated(bad) -> None:
    with pytest.raises(ValidationError):
        RMIA.Params(**bad)


def test_z_beyond_the_population_is_an_error(monkeypatch) -> None:
    with pytest.raises(ValueError, match="population has 3"):
        RMIA(RMIA.Params(shadows=2, z=4)).run(hand_view(monkeypatch))


@pytest.fixture
def overfit(tmp_path: Path) -> tuple[MembershipGame, TrainingProcedure]:
    dataset = load_dataset(PluginRef(name="synthetic", n=600, features=20, classes=4, seed=1))
    game = MembershipGame(MembershipGameSpec(name="membership", members=60, test=60, population=200), dataset, seed=0)
    proc = TrainingProcedure(NonPrivate(NonPrivate.Params()), architecture("mlp", 20, 4, hidden=[64]),
                             Recipe(epochs=60, lr=0.1, momentum=0.9, batch_size=20), cache=TensorCache(tmp_path))
    return game, proc


@pytest.mark.slow
def test_rmia_finds_members_of_an_overfit_model(overfit) -> None:
    game, proc = overfit
    release = game.release(proc)
    baseline = game.play(ThresholdMIA(ThresholdMIA.Params()), release, proc).metrics["auc"]
    for variant in ("online", "offline"):
        outcome = game.play(RMIA(RMIA.Params(shadows=4, variant=variant, z=150)), release, proc)
        assert outcome.metrics["auc"] > 0.65 and outcome.metrics["auc"] > baseline - 0.02, variant
        # members and non-members differ, and no more than 1/|Z| of the 60 non-members share the top score
        assert outcome.metrics["reference_points"] == 150 and outcome.metrics["top_ties"] <= max(1, 60 // 150)
    lira = game.play(LiRA(LiRA.Params(shadows=4, fixed_variance=True)), release, proc).metrics["auc"]
    assert lira > 0.6, "the same pool serves LiRA"
