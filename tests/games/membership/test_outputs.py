"""Bring your own outputs (issue 39, 3): LiRA and RMIA run on saved logits give the scores the arena's attacks give
on the same models' logits, because both call the same formulas (``arena.games.membership.formulas``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import arena
from arena.contracts.spec import PluginRef
from arena.engine.recipe import Recipe
from arena.games.membership import MembershipGame, MembershipGameSpec
from arena.pipeline.plan import load_dataset
from arena.pipeline.procedure import TrainingProcedure
from arena.pipeline.store import TensorCache
from arena_plugins.defenses import NonPrivate
from arena_plugins.membership import LiRA, ThresholdMIA
from arena_plugins.rmia import RMIA
from tests.conftest import architecture

SHADOWS = 4


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, np.ndarray], dict[str, tuple]]:
    """A small membership game: the arena's scores and decisions of LiRA (online, offline), RMIA (online, offline)
    and the loss threshold, and the outputs they read, saved as a user would save them."""
    dataset = load_dataset(PluginRef(name="synthetic", n=400, features=10, classes=3, seed=1))
    game = MembershipGame(MembershipGameSpec(name="membership", members=30, test=30, population=60), dataset, seed=0)
    proc = TrainingProcedure(NonPrivate(NonPrivate.Params()), architecture("mlp", 10, 3, hidden=[16]),
                             Recipe(epochs=8, lr=0.1, momentum=0.9, batch_size=10),
                             cache=TensorCache(tmp_path_factory.mktemp("cache")))
    release = game.release(proc)
    attacks = {
        "lira-online": LiRA(LiRA.Params(shadows=SHADOWS, fixed_variance=True)),
        "lira-offline": LiRA(LiRA.Params(shadows=SHADOWS, fixed_variance=True, variant="offline")),
        "rmia-online": RMIA(RMIA.Params(shadows=SHADOWS)),
        "rmia-offline": RMIA(RMIA.Params(shadows=SHADOWS, variant="offline")),
        "loss-threshold": ThresholdMIA(ThresholdMIA.Params()),
    }
    arena_says = {}
    for name, attack in attacks.items():
        view = game.view(attack, release, proc)
        guess = attack.run(view)
        arena_says[name] = (np.asarray(guess.scores), np.asarray(guess.decisions))
    view = game.view(attacks["lira-online"], release, proc)
    pool = arena.train_pool(view, SHADOWS)  # the pool the attacks read (the same seeds: the same models)
    cX, cy, pX, py = view.challenge_X, view.challenge_y, view.population_X, view.population_y
    saved = {
        "target_logits": view.model.log_proba(cX).numpy(),  # log-probabilities: logits up to a constant
        "labels": cy.numpy(),
        "is_member": game._is_member.astype(np.int8),
        "reference_logits": pool.models.logits(cX).numpy(),
        "reference_in": pool.challenge_in.astype(np.uint8),
        "population_logits": view.model.log_proba(pX).numpy(),
        "population_labels": py.numpy(),
        "population_reference_logits": pool.models.logits(pX).numpy(),
    }
    return saved, arena_says


@pytest.mark.slow  # the module's game and pool train here
def test_saved_logits_give_lira_and_rmia_the_arenas_scores_exactly(played, tmp_path: Path) -> None:
    saved, arena_says = played
    path = tmp_path / "outputs.npz"
    np.savez(path, **saved)
    result = arena.evaluate_outputs(path, fixed_variance=True, resamples=0)
    assert result.skipped == {}
    for attack in ("lira-online", "lira-offline", "rmia-online", "rmia-offline"):
        scores, decisions = arena_says[attack]
        ev = result.evaluations[attack]
        assert np.array_equal(ev.scores, scores), attack  # bit for bit: the same formulas on the same outputs
        assert ev.metrics["auc"] == arena.evaluate(scores, saved["is_member"], resamples=0).metrics["auc"]
        assert np.array_equal(ev.metrics["balanced_accuracy"], arena.evaluate(
            scores, saved["is_member"], decisions=decisions, resamples=0).metrics["balanced_accuracy"]), attack
    # the loss threshold: the same signal, computed in float64 from the log-probabilities (the arena's in float32)
    np.testing.assert_allclose(result.evaluations["loss-threshold"].scores, arena_says["loss-threshold"][0],
                               rtol=1e-5, atol=1e-6)


def test_losses_instead_of_logits_give_the_same_attacks(played) -> None:
    saved, _ = played
    logits = arena.evaluate_outputs(saved, fixed_variance=True, resamples=0)

    def loss(logp: np.ndarray, y: np.ndarray) -> np.ndarray:
        logp = logp - np.log(np.exp(logp.astype(np.float64)).sum(-1, keepdims=True))
        return -np.take_along_axis(logp, np.broadcast_to(y, logp.shape[:-1])[..., None], -1)[..., 0]

    as_losses = {"is_member": saved["is_member"], "reference_in": saved["reference_in"],
                 "target_losses": loss(saved["target_logits"], saved["labels"]),
                 "reference_losses": loss(saved["reference_logits"], saved["labels"]),
                 "population_losses": loss(saved["population_logits"], saved["population_labels"]),
                 "population_reference_losses": loss(saved["population_reference_logits"], saved["population_labels"])}
    losses = arena.evaluate_outputs(as_losses, fixed_variance=True, resamples=0)
    for attack, ev in logits.evaluations.items():
        np.testing.assert_allclose(losses.evaluations[attack].scores, ev.scores, rtol=1e-6, atol=1e-8)


def test_what_the_arrays_cannot_support_is_skipped_with_the_reason(played) -> None:
    saved, _ = played
    no_masks = {k: v for k, v in saved.items() if k not in ("reference_in",) and not k.startswith("population")}
    result = arena.evaluate_outputs(no_masks, resamples=0)
    assert set(result.evaluations) == {"loss-threshold", "lira-offline"}  # every reference OUT: offline only
    assert "reference_in" in result.skipped["lira-online"] and "population" in result.skipped["rmia-offline"]
    assert result.evaluations["lira-offline"].metrics.get("balanced_accuracy") is None  # no population: no threshold


def _cli(*args: str) -> int:
    from arena.cli import main

    return main(list(args))


@pytest.mark.slow  # 25 figures
def test_the_command_writes_the_board_and_every_attacks_figures(played, tmp_path: Path, capsys) -> None:
    saved, _ = played
    np.savez(tmp_path / "o.npz", **saved)
    assert _cli("evaluate-outputs", str(tmp_path / "o.npz"), "--out", str(tmp_path / "out"), "--resamples", "20",
                "--format", "json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert set(shown["attacks"]) == {"loss-threshold", "lira-online", "lira-offline", "rmia-online", "rmia-offline"}
    board = json.loads((tmp_path / "out" / "board.json").read_text())["board"]
    assert [r["auc"] for r in board] == sorted((r["auc"] for r in board), reverse=True)
    for attack in shown["attacks"]:
        for name in ("metrics.json", "metrics.csv", "roc.png", "roc.svg", "roc.pdf"):
            assert (tmp_path / "out" / attack / name).stat().st_size > 0


@pytest.mark.parametrize(("change", "field", "says"), [
    ({"reference_logits": None}, "reference_in", "without reference_logits"),
    ({"labels": np.zeros(3, dtype=np.int64)}, "labels", "expected (60,)"),
    ({"labels": "float"}, "labels", "outside [0, 3)"),
    ({"target_logits": "nan"}, "target_logits", "NaN or infinite"),
    ({"reference_in": "shape"}, "reference_in", "references × records"),
    ({"is_member": "twos"}, "is_member", "0/1 or true/false"),
    ({"population_reference_logits": None}, "population_reference_logits", "missing"),
    ({"target_logits": None}, "target_logits", "missing"),
    ({"reference_logits": "object"}, "reference_logits", "unpickling"),
])
def test_a_bad_outputs_file_is_exit_2_naming_file_and_field_and_writes_nothing(played, tmp_path: Path, capsys,
                                                                               change, field, says) -> None:
    saved, _ = played
    arrays = dict(saved)
    for key, value in change.items():
        if value is None:
            arrays.pop(key)
        elif isinstance(value, np.ndarray):
            arrays[key] = value
        elif value == "float":
            arrays[key] = arrays[key].astype(np.float64) + 3
        elif value == "nan":
            arrays[key] = arrays[key].copy()
            arrays[key][2, 1] = np.nan
        elif value == "shape":
            arrays[key] = arrays[key][:, :5]
        elif value == "twos":
            arrays[key] = arrays[key] * 2
        elif value == "object":
            arrays[key] = np.array([object()] * 3, dtype=object)
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    out = tmp_path / "out"
    assert _cli("evaluate-outputs", str(path), "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert str(path) in err and f"{field}:" in err and says in err, err
    assert not out.exists()


def test_a_zero_loss_keeps_lira_finite() -> None:
    phi = arena.loss_log_odds(np.array([0.0, 1e-300, np.log(2.0)]))
    assert np.isfinite(phi).all() and phi[0] >= phi[1] > 600 and abs(phi[2]) < 1e-12  # p = ½: φ = 0
