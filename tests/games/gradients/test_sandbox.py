"""An attack's process never holds the secret client batches: cheats that take them from the game's heap or from
the call stack win in the game's process and get nothing in the sandbox, where every gradients attack runs (the
routes of ``tests/pipeline/sandbox/test_cheating.py``, for this game)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from arena.contracts.spec import PluginRef
from arena.engine.recipe import Recipe
from arena.games.gradients import GradientsGame, GradientsGameSpec
from arena.pipeline.plan import load_dataset
from arena.pipeline.procedure import TrainingProcedure
from arena.pipeline.sandbox import AttackFailed, AttackProcess, guess_types
from arena_plugins.gradient_defenses import SecureAggregation
from tests.conftest import architecture
from tests.games.gradients import cheats

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]

CHEATS = [cheats.GradientsGc, cheats.GradientsFrame]


class Setting:
    """A gradients game on digits (B = 2 under secure aggregation over 2 clients) and its release."""

    def __init__(self) -> None:
        dataset = load_dataset(PluginRef(name="digits"))
        self.game = GradientsGame(GradientsGameSpec(name="gradients", batch_size=2, batches=3, pretrain=100,
                                                    population=50, test=50), dataset, 11)
        self.procedure = TrainingProcedure(SecureAggregation(SecureAggregation.Params(clients=2)),
                                           architecture("mlp", (1, 8, 8), 10, hidden=[16]),
                                           Recipe(epochs=1, lr=0.1, batch_size=32))
        self.release = self.game.release(self.procedure)

    def play(self, attack, *, sandbox: bool) -> dict:
        if not sandbox:
            return self.game.play(attack, self.release, self.procedure).metrics

        def run(views: list) -> list:
            cls = type(attack)
            with AttackProcess(cls, params=attack.params.model_dump(mode="json"),
                               guesses=guess_types(self.game)) as process:
                return [process.run(v) for v in views]

        return self.game.play(attack, self.release, self.procedure, run=run).metrics


@pytest.fixture(scope="module")
def setting() -> Iterator[Setting]:
    yield Setting()


@pytest.mark.parametrize("cls", CHEATS, ids=lambda c: c.name)
def test_in_the_games_process_the_cheat_takes_every_batch(setting: Setting, cls) -> None:
    metrics = setting.play(cls(cls.Params()), sandbox=False)
    assert metrics["target_success_rate"] == 1.0 and metrics["target_label_accuracy"] == 1.0, metrics


@pytest.mark.parametrize("cls", CHEATS, ids=lambda c: c.name)
def test_in_the_sandbox_the_cheat_gets_nothing(setting: Setting, cls) -> None:
    try:
        metrics = setting.play(cls(cls.Params()), sandbox=True)
    except AttackFailed as exc:  # blocked outright is as good
        assert str(exc).startswith(("ThreatModelError", "PermissionError")), exc
        return
    assert metrics["target_success_rate"] <= metrics["kappa"], metrics
    assert metrics["target_psnr_mean"] < 20, "the population's mean, not a record"


def test_the_sandboxed_view_carries_the_update_and_no_record(setting: Setting) -> None:
    view = setting.game.view(cheats.GradientsGc(cheats.GradientsGc.Params()), setting.release, setting.procedure)
    secret = setting.game.dataset.X[setting.game.update_records(0, 2)]
    held = view.population_X.reshape(len(view.population_X), -1).numpy()
    assert not any(np.equal(held, row).all(axis=1).any() for row in secret)
