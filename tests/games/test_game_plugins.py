"""Games are plugins: a third-party game registered through ``register_games`` from a real distribution plays in a
scenario like the built-in ones; an unknown game gets "did you mean"; the field paths of a game spec's errors are
those of the scenario file (``tracks[0].game.<field>``); ``play`` is ``score`` of the attack's run on ``view``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arena.cli import EXIT_INPUT, EXIT_OK, main
from arena.plugins import registries
from tests.conftest import TINY, write_scenario

TOY_GAME = '''
from typing import Annotated, Literal

import numpy as np
from pydantic import ConfigDict, PositiveInt

from arena import (
    Attack, BlackBox, Game, GameSpec, Grant, MembershipGuess, Metric, Outcome, Release, View, derive_seed, hookimpl,
)


class ParitySpec(GameSpec):
    model_config = ConfigDict(extra="forbid")
    name: Literal["parity"]
    train: PositiveInt = 40
    test: PositiveInt = 60

    def required_points(self):
        return self.train + self.test


class ParityView(View):
    X: object
    model: Annotated[BlackBox, Grant("query")]


def report(ctx):
    return f"<p>parity section of {ctx.board.track}</p>"


class ParityGame(Game):
    """The attacker predicts each test record's label parity from black-box queries; the secret is the labels."""

    name = "parity"
    Spec = ParitySpec
    View = ParityView
    Guess = MembershipGuess
    report_view = "arena_parity:report"
    metrics = (Metric("parity_accuracy", "parity", True, "share of test labels whose parity was guessed", (0.0, 1.0)),)

    def __init__(self, spec, dataset, seed):
        super().__init__(spec, dataset, seed)
        order = np.random.default_rng(seed).permutation(dataset.n)
        self.train_idx, self.test_idx = order[: spec.train], order[spec.train : spec.train + spec.test]

    @classmethod
    def train_size(cls, spec):
        return spec.train

    def release(self, procedure):
        X, y = self.records(self.train_idx)
        models, claim = procedure(X[None], y[None], [derive_seed(self.seed, "init")], [derive_seed(self.seed, "train")])
        Xt, yt = self.records(self.test_idx)
        return Release(models=models, utility=float(models.accuracy(Xt, yt)[0]), claim=claim)

    def view(self, attack, release, procedure):
        X, _ = self.records(self.test_idx)
        return ParityView(attack.name, attack.threat_model, {"X": X, "model": BlackBox(release.models)})

    def score(self, attack, guess):
        truth = self.dataset.y[self.test_idx] % 2
        return Outcome({"parity_accuracy": float((np.asarray(guess.decisions) == truth).mean())})


class ParityFromPrediction(Attack):
    name = "parity-from-prediction"
    game = "parity"
    threat_model = frozenset({"query"})

    def run(self, view: ParityView) -> MembershipGuess:
        labels = view.model.predict_proba(view.X).argmax(-1).reshape(-1).numpy()
        return MembershipGuess(scores=labels.astype(float), decisions=(labels % 2).astype(bool))


@hookimpl
def register_games(register):
    register(ParityGame)


@hookimpl
def register_attacks(register):
    register(ParityFromPrediction)
'''

PARITY = """
name: parity
seeds: [0]
tracks:
  - name: digits-parity
    dataset: {name: digits}
    model: {name: logreg}
    training: {epochs: 5, batch_size: 32, lr: 0.1}
    game: {name: parity, train: 200, test: 300}
    defenses:
      - {name: nonprivate}
    attacks:
      - {name: parity-from-prediction}
"""


def test_a_third_party_game_plays_in_a_scenario(plugin_dist, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("ARENA_TRUSTED", "arena-parity")  # a game with its attack: trusted by name
    plugin_dist("arena-parity", "arena_parity", TOY_GAME, entry="parity")
    entry = registries().games.entry("parity")
    assert entry.distribution == "arena-parity"
    assert registries().metrics.entry("parity_accuracy").distribution == "arena-parity"  # its metrics come along

    assert main(["plugins"]) == EXIT_OK
    listing = capsys.readouterr().out
    assert "games:" in listing and "parity" in listing and "membership" in listing

    scenario = write_scenario(tmp_path / "parity.yaml", PARITY)
    run = tmp_path / "run"
    assert main(["run", str(scenario), "--out", str(run), "--serial"]) == EXIT_OK
    (row,) = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines() if line]
    assert row["status"] == "ok", row.get("traceback")
    assert row["game"] == "parity"
    # a trained model's predictions carry the parity of its labels far above the coin's 0.5
    assert row["metrics"]["parity_accuracy"] > 0.6  # chance is 0.5; 0.69 with the suite's run secret
    assert row["metric_info"] == {"parity_accuracy": {"higher_is_better": True, "bounds": [0.0, 1.0]}}
    page = (run / "report" / "index.html").read_text()
    assert "<p>parity section of digits-parity</p>" in page  # its report_view, named "module:function"
    assert registries().games.get("parity").capabilities == {"query"}  # read from its View


def test_a_game_spec_error_names_its_field_paths(plugin_dist, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("ARENA_TRUSTED", "arena-parity")
    plugin_dist("arena-parity", "arena_parity", TOY_GAME, entry="parity")
    bad = write_scenario(tmp_path / "bad.yaml", PARITY.replace("train: 200", "train: 0, colour: red"))
    assert main(["validate", str(bad)]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert f"{bad}: tracks[0].game.train:" in err and f"{bad}: tracks[0].game.colour:" in err


@pytest.mark.parametrize(("change", "path"), [
    (("members: 50", "members: 0"), "tracks[0].game.members"),
    (("members: 50", "members: true"), "tracks[0].game.members"),
    (("test: 100}", "test: 100, colour: red}"), "tracks[0].game.colour"),
    (("name: membership, members: 50, test: 100", "name: reconstruction, prior: uniform"), "tracks[0].game.prior"),
    (("name: membership, members: 50, test: 100", "name: reconstruction, fixed: -1"), "tracks[0].game.fixed"),
])
def test_builtin_game_spec_errors_keep_their_field_paths(tmp_path: Path, capsys, change, path: str) -> None:
    text = TINY.replace(*change, 1)
    assert text != TINY
    bad = write_scenario(tmp_path / "bad.yaml", text)
    assert main(["validate", str(bad)]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert f"{bad}: {path}:" in err, err
    assert "Traceback" not in err


def test_an_unknown_game_gets_did_you_mean(tmp_path: Path, capsys) -> None:
    bad = write_scenario(tmp_path / "bad.yaml", TINY.replace("name: membership", "name: membershp", 1))
    assert main(["validate", str(bad)]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert f"{bad}: tracks[0].game.name: unknown game 'membershp'; did you mean 'membership'?" in err


def test_the_builtin_games_come_through_the_entry_point() -> None:
    regs = registries()
    for name in ("membership", "reconstruction"):
        entry = regs.games.entry(name)
        assert entry.distribution == "privacy-arena" and entry.plugin == "privacy-arena:games"
    assert regs.metrics.entry("auc").plugin == "privacy-arena:games"
    assert regs.metrics.entry("success_rate").obj.game == "reconstruction"
