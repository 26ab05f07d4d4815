"""Membership attacks: LiRA's statistic and Gaussian arithmetic, the shadow attack's bookkeeping, real games."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from scipy.stats import norm
from sklearn.dummy import DummyClassifier

import arena_plugins.membership as membership
from arena import fit_gaussians, likelihood_ratio, log_odds, one_sided_out, true_class_log_odds
from arena.contracts.spec import PluginRef
from arena.engine.recipe import Recipe
from arena.games.membership import MembershipGame, MembershipGameSpec
from arena.games.membership.pools import plan_pool
from arena.pipeline.plan import load_dataset, plan
from arena.pipeline.procedure import TrainingProcedure
from arena.pipeline.store import RunStore, TensorCache
from arena.pipeline.tournament import run
from arena_plugins.defenses import NonPrivate
from arena_plugins.membership import LiRA, ShadowMIA, ThresholdMIA
from tests.conftest import architecture


def test_log_odds_is_log_p_over_one_minus_p_for_every_class() -> None:
    logits = torch.randn(3, 5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 3
    p = torch.softmax(logits, dim=-1)
    assert torch.allclose(log_odds(logits), torch.log(p / (1 - p)), atol=1e-10)
    y = torch.tensor([0, 3, 1, 2, 2])
    expected = log_odds(logits).gather(-1, y.expand(3, 5).unsqueeze(-1)).squeeze(-1).numpy()
    assert np.allclose(true_class_log_odds(logits, y), expected, atol=1e-12)


def test_log_odds_stays_finite_where_one_minus_p_rounds_to_zero() -> None:
    logits = torch.tensor([[40.0, 0.0, 0.0]])
    assert torch.softmax(logits, -1)[0, 0] == 1.0, "float32 probabilities cannot represent 1 - p here"
    phi = true_class_log_odds(logits, torch.tensor([0]))
    assert phi[0] == pytest.approx(40.0 - math.log(2.0), abs=1e-9)
    from_log_probs = true_class_log_odds(torch.log_softmax(logits, -1), torch.tensor([0]))
    assert from_log_probs[0] == pytest.approx(phi[0], abs=1e-5), "logits and log-probabilities agree"
    assert log_odds(logits)[0, 1].item() == pytest.approx(-40.0 - math.log1p(math.exp(-40.0)), abs=1e-9)


# Hand-made confidences: 4 shadows x 3 points; shadow k trained on point j where IN is True.
PHI = np.array([[2.0, -1.0, 0.5], [3.0, -2.0, 1.5], [0.0, 1.0, -0.5], [-1.0, 0.5, 0.0]])
IN = np.array([[True, False, True], [True, True, False], [False, False, True], [False, True, False]])


def test_gaussian_fits_are_the_masked_mean_and_std_per_point() -> None:
    fit = fit_gaussians(PHI, IN, fixed_variance=False)
    for j in range(3):
        assert fit.mean[j] == pytest.approx(PHI[IN[:, j], j].mean())
        assert fit.std[j] == pytest.approx(PHI[IN[:, j], j].std())
    fixed = fit_gaussians(PHI, IN, fixed_variance=True)
    residuals = np.concatenate([PHI[IN[:, j], j] - PHI[IN[:, j], j].mean() for j in range(3)])
    assert np.allclose(fixed.mean, fit.mean) and np.allclose(fixed.std, np.sqrt(np.mean(residuals**2)))
    with pytest.raises(ValueError, match="at least one"):
        fit_gaussians(PHI, np.zeros_like(IN), fixed_variance=False)


@pytest.mark.parametrize("fixed_variance", [False, True])
def test_online_score_is_the_gaussian_log_likelihood_ratio(fixed_variance: bool) -> None:
    phi = np.array([2.5, -1.5, 1.0])
    scores = likelihood_ratio(PHI, IN, phi, fixed_variance)
    fit_in, fit_out = fit_gaussians(PHI, IN, fixed_variance), fit_gaussians(PHI, ~IN, fixed_variance)
    expected = norm.logpdf(phi, fit_in.mean, fit_in.std) - norm.logpdf(phi, fit_out.mean, fit_out.std)
    assert np.allclose(scores, expected, rtol=1e-12)
    by_hand = norm.logpdf(2.5, 2.5, 0.5) - norm.logpdf(2.5, -0.5, 0.5)  # point 0: IN {2, 3}, OUT {0, -1}
    assert scores[0] == pytest.approx(by_hand) if not fixed_variance else scores[0] > 0


def test_offline_score_is_the_one_sided_out_test() -> None:
    phi = np.array([2.5, -1.5, 1.0])
    scores = one_sided_out(PHI, ~IN, phi, fixed_variance=False)
    out = fit_gaussians(PHI, ~IN, fixed_variance=False)
    assert np.allclose(scores, norm.logcdf(phi, out.mean, out.std), rtol=1e-12)
    assert one_sided_out(PHI, ~IN, np.array([60.0, 0.0, 0.0]), False)[0] == pytest.approx(0.0, abs=1e-12)
    assert np.isfinite(one_sided_out(PHI, ~IN, np.array([-60.0, 0.0, 0.0]), False)).all()


@pytest.mark.parametrize("attack", [LiRA, ShadowMIA])
def test_shadow_counts_must_be_even(attack) -> None:
    with pytest.raises(ValidationError, match="even"):
        attack.Params(shadows=7)


@pytest.fixture
def overfit(tmp_path: Path) -> tuple[MembershipGame, TrainingProcedure]:
    game = MembershipGame(MembershipGameSpec(name="membership", members=50, test=50, population=150),
                          load_dataset(PluginRef(name="digits")), seed=0)
    proc = TrainingProcedure(NonPrivate(NonPrivate.Params()), architecture("mlp", (1, 8, 8), 10, hidden=[32]),
                             Recipe(epochs=30, lr=0.1, momentum=0.9, batch_size=25), cache=TensorCache(tmp_path))
    return game, proc


class Recorder(DummyClassifier):
    """A stand-in attack model that records the IN/OUT labels and feature width it is trained on."""

    labels: list[np.ndarray] = []
    widths: list[int] = []

    def fit(self, X, y):
        Recorder.labels.append(np.asarray(y).copy())
        Recorder.widths.append(X.shape[1])
        return super().fit(X, y)


@pytest.mark.slow
@pytest.mark.parametrize("per_class", [True, False])
def test_shadow_attack_learns_from_the_pool_labels_never_the_secret(overfit, monkeypatch, per_class) -> None:
    game, proc = overfit
    monkeypatch.setattr(membership, "attack_classifier", lambda kind, seed: Recorder())
    Recorder.labels, Recorder.widths = [], []
    attack = ShadowMIA(ShadowMIA.Params(shadows=4, per_class=per_class))
    game.play(attack, game.release(proc), proc)
    pool_in = plan_pool(len(game.challenge), 50, 4, game.view(attack, game.release(proc), proc).pool_seed).challenge_in
    cy = game.dataset.y[game.challenge]
    if per_class:
        expected = [pool_in[:, cy == c].reshape(-1) for c in np.unique(cy)]
        assert Recorder.widths == [10] * len(expected)
    else:
        expected = [pool_in.reshape(-1)]
        assert Recorder.widths == [20], "log-odds of 10 classes and the one-hot true label"
    assert all(np.array_equal(a, b) for a, b in zip(Recorder.labels, expected, strict=True))


def test_lira_and_shadow_attack_find_members_of_an_overfit_model(overfit) -> None:
    game, proc = overfit
    release = game.release(proc)
    baseline = game.play(ThresholdMIA(ThresholdMIA.Params()), release, proc).metrics["auc"]
    online = game.play(LiRA(LiRA.Params(shadows=16)), release, proc)
    assert online.metrics["auc"] > baseline + 0.03 and online.metrics["auc"] > 0.8
    offline = game.play(LiRA(LiRA.Params(shadows=16, variant="offline", fpr=0.2)), release, proc)
    assert offline.metrics["auc"] > 0.7 and offline.metrics["balanced_accuracy"] > 0.6
    shadow = game.play(ShadowMIA(ShadowMIA.Params(shadows=16, classifier="logistic")), release, proc)
    assert shadow.metrics["auc"] > 0.7


SCENARIO = """
name: mia-tiny
seeds: [0]
tracks:
  - name: digits-tiny
    dataset: {name: digits}
    model: {name: mlp, hidden: [16]}
    training: {epochs: 4, batch_size: 20, lr: 0.1, momentum: 0.9}
    game: {name: membership, members: 40, test: 50, population: 100}
    defenses:
      - {name: nonprivate}
      - {name: dpsgd, epsilons: [2], delta: 1.0e-3}
    attacks:
      - {name: threshold-mia}
      - {name: shadow-mia, shadows: 6, classifier: logistic}
      - {name: lira, shadows: 6}
      - {name: lira, shadows: 6, variant: offline, fixed_variance: true}
"""


@pytest.mark.slow
def test_tiny_tournament_shares_one_pool_per_release_and_reruns_from_the_cache(tmp_path: Path) -> None:
    path = tmp_path / "mia.yaml"
    path.write_text(SCENARIO)
    store = RunStore(tmp_path / "run")
    rows = run(plan([path]), store, serial=True)
    assert len(rows) == 2 * 4 and all(r["status"] == "ok" for r in rows), [r["error"] for r in rows]
    for row in rows:
        arrays = store.load_arrays(row["key"])
        assert len(arrays["scores"]) == len(arrays["is_member"]) == 80 and np.isfinite(arrays["scores"].numpy()).all()
    models = sorted((tmp_path / "run" / "cache" / "models").iterdir())
    assert len(models) == 2 * 2, "per defense: the release and ONE shadow pool for all three shadow attacks"
    stamps = {p.name: p.stat().st_mtime_ns for p in models}
    store.results_path.unlink()
    again = run(plan([path]), store, serial=True)
    assert [r["metrics"] for r in again] == [r["metrics"] for r in rows]
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "run" / "cache" / "models").iterdir()} == stamps
