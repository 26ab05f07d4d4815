"""The audit game: K canaried models per seed, an auditor's scores, the one-run verdict and the claim check.

What must be true: ``arena run`` exits with status 3 on every deliberately broken DP-SGD defense of
tests/broken_defenses.py (installed as a plugin distribution) and flags none of the correct ``dpsgd``; the view
never holds the inclusion bits and grants parameters and black boxes only by capability; the game rejects a guess
of the wrong shape; the shipped audit scenario reaches the power targets with the Gaussian fit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from arena.cli import EXIT_VIOLATION, main
from arena.contracts.view import ThreatModelError
from arena.games.audit import AuditGame, AuditGameSpec, CanaryGuess
from tests.conftest import write_scenario

BROKEN_SOURCE = (Path(__file__).resolve().parents[2] / "broken_defenses.py").read_text() + '''

from arena import hookimpl


@hookimpl
def register_defenses(register) -> None:
    for cls in BROKEN:
        register(cls)
'''

BROKEN_NAMES = ("broken-no-clipping", "broken-quarter-noise", "broken-noise-on-mean", "broken-half-steps",
                "broken-no-noise")

SCENARIO = """
name: broken
seeds: [0]
rank_by: empirical_epsilon
tracks:
  - name: digits-audit
    dataset: {name: digits}
    model: {name: logreg}
    training: {epochs: 20, lr: 1.0}
    game: {name: audit, members: 200, test: 100, models: 16, kind: gradient, canaries: 512}
    defenses:
      - {name: dpsgd, epsilons: [1], delta: 1.0e-5}
""" + "".join(f"      - {{name: {n}, epsilons: [1], delta: 1.0e-5}}\n" for n in BROKEN_NAMES) + """    attacks:
      - {name: canary-auditor}
"""


@pytest.mark.slow
def test_arena_run_flags_every_broken_dpsgd_with_exit_status_3_and_never_the_correct_one(plugin_dist, tmp_path,
                                                                                          capsys):
    plugin_dist("arena-broken-dpsgd", "arena_broken_dpsgd", BROKEN_SOURCE)
    scenario = write_scenario(tmp_path / "broken.yaml", SCENARIO)
    out = tmp_path / "run"
    assert main(["run", str(scenario), "--out", str(out), "--serial", "--no-report"]) == EXIT_VIOLATION
    printed = capsys.readouterr().out
    assert "6 audit matchup(s) against a claimed (ε, δ), 5 violation(s)" in printed

    from arena import load

    results = load(out)
    assert [r["status"] for r in results.rows] == ["ok"] * 6
    records = {a.defense_label.split("(")[0]: a for a in results.audit.games["audit"].records}
    assert sorted(records) == sorted(("dpsgd", *BROKEN_NAMES))
    correct = records["dpsgd"]
    assert not correct.violation and correct.claim_consistent and correct.lower_bound < correct.claimed_epsilon
    for name in BROKEN_NAMES:
        a = records[name]
        assert a.violation, name
        assert a.claimed_epsilon == pytest.approx(correct.claimed_epsilon)  # each claims the correct ε
        assert not a.claim_consistent, name  # the mechanism really run is less private than claimed
    # the canaries' assumption-free bounds alone refute the gross bugs (95 %); half the steps (√2 away in μ) only
    # the model-based Gaussian fit of 8,192 full-batch gradient canaries sees, outside the verdict: the claim check
    # refutes it
    for name in ("broken-no-clipping", "broken-quarter-noise", "broken-noise-on-mean", "broken-no-noise"):
        assert records[name].flagged, name
        assert max(b.epsilon for _, b in records[name].bounds) > records[name].claimed_epsilon, name
    for name in BROKEN_NAMES:
        assert records[name].model_based_epsilon > records[name].claimed_epsilon, name
    assert correct.gaussian is not None and correct.gaussian.epsilon < correct.claimed_epsilon
    # the audit's records list violations first
    assert [a.violation for a in results.audit.games["audit"].records] == [True] * 5 + [False]


class _Attack:
    name = "probe"

    def __init__(self, threat_model):
        self.threat_model = frozenset(threat_model)


@pytest.fixture(scope="module")
def played():
    from sklearn.datasets import load_digits

    from arena.contracts.dataset import Dataset
    from arena.engine.architecture import Architecture
    from arena.engine.recipe import Recipe
    from arena.pipeline.procedure import TrainingProcedure
    from arena_plugins.defenses import DPSGD
    from arena_plugins.models import LogReg

    d = load_digits()
    data = Dataset("digits", (d.data / 16.0).astype(np.float32), d.target.astype(np.int64), 10, "image", (1, 8, 8))
    spec = AuditGameSpec(name="audit", members=100, test=50, models=4, kind="both", canaries=8, input_canaries=6)
    game = AuditGame(spec, data, seed=0)
    procedure = TrainingProcedure(DPSGD(DPSGD.Params(epsilons=[4.0], delta=1e-5)),
                                  Architecture(LogReg(LogReg.Params()), (64,), 10), Recipe(epochs=3, lr=1.0))
    release = game.release(procedure)
    return game, release, procedure


def test_the_view_grants_by_capability_and_never_holds_the_bits(played):
    game, release, procedure = played
    white = game.view(_Attack({"parameters", "query"}), release, procedure)
    assert white.kinds == ("gradient", "input") and white.n_models == 4
    assert tuple(white.gradient_index.shape) == (4, 8) and tuple(white.canary_X.shape) == (6, 64)
    assert white.parameters.k == 4 and white.init.k == 4 and len(white.models) == 4
    assert not any("includ" in name or "truth" in name for name in dir(white))
    black = game.view(_Attack({"query"}), release, procedure)
    with pytest.raises(ThreatModelError, match="parameters"):
        black.parameters  # noqa: B018 - the view refuses it
    assert black.models[0].loss(black.canary_X, black.canary_y).shape == (6,)


def test_the_game_scores_the_auditor_and_rejects_malformed_guesses(played):
    game, release, procedure = played
    from arena_plugins.auditor import CanaryAuditor

    auditor = CanaryAuditor(CanaryAuditor.Params())
    outcome = game.play(auditor, release, procedure)
    m = outcome.metrics
    assert m["gradient_canaries"] == 32 and m["input_canaries"] == 24 and m["models"] == 4
    assert m["eps_one_run"] == max(m["gradient_eps_one_run"], m["input_eps_one_run"])
    # two one-run bounds and two f-DP analyses; the Gaussian fit is model-based, outside the verdict
    assert m["gradient_one_run_alpha"] == pytest.approx(0.05 / 4)
    assert not m["gaussian_in_verdict"] and m["model_based_epsilon"] == m["gradient_eps_gdp_fit"]
    assert m["empirical_epsilon"] == max(m["eps_one_run"], m["gradient_eps_fdp"], m["input_eps_fdp"])
    assert set(outcome.arrays) == {"gradient_scores", "gradient_truth", "input_scores", "input_truth"}
    assert json.dumps(m)  # a result row must serialise
    with pytest.raises(ValueError, match="shape"):
        game.score(auditor, CanaryGuess({"gradient": np.zeros((4, 7)), "input": np.zeros((4, 6))}))
    with pytest.raises(ValueError, match="kinds"):
        game.score(auditor, CanaryGuess({"gradient": np.zeros((4, 8))}))
    with pytest.raises(TypeError):
        game.score(auditor, {"gradient": np.zeros((4, 8))})


def test_a_second_release_comes_from_the_cache_with_the_same_bits(tmp_path, played):
    game, _, procedure = played
    from dataclasses import replace

    from arena.pipeline.store import TensorCache

    cached = replace(procedure, cache=TensorCache(tmp_path))
    first = AuditGame(game.spec, game.dataset, seed=0)
    first.release(cached)
    second = AuditGame(game.spec, game.dataset, seed=0)
    trained = cached.stats.trained
    second.release(cached)
    assert cached.stats.trained == trained  # no retraining
    assert np.array_equal(first.run.gradient.included.numpy(), second.run.gradient.included.numpy())
    assert np.array_equal(first.run.inputs_in, second.run.inputs_in)


def test_spec_problems_name_the_field():
    from arena.contracts.dataset import Dataset

    data = Dataset("d", np.zeros((300, 4), np.float32), np.zeros(300, np.int64), 2, "tabular", (4,))
    bad = AuditGameSpec(name="audit", members=100, test=50, kind="both", canaries=0, input_canaries=0)
    fields = [f for f, _ in AuditGame.problems(bad, data)]
    assert "canaries" in fields and "input_canaries" in fields
    assert AuditGame.problems(AuditGameSpec(name="audit", members=100, test=50), data) == []
