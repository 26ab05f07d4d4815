"""Results are a function of the scenario as run: a plugin's version bumped, or its source edited in an editable
install, gives its matchups new keys; the next run replays those matchups (and retrains only the releases whose
code changed), and the leaderboard, the frame, the report and the audit read only the new rows, while the old
ones stay in results.jsonl as history (``arena leaderboard --history``). ``arena run --fresh`` ignores the cache."""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

import pytest

from arena.api import Results
from arena.cli import main
from arena.pipeline import provenance
from arena.pipeline.store import RunStore
from arena.plugins import forget_registries
from arena.results.report.html import render_page
from tests.conftest import write_scenario

DEFENSE = '''
import torch.nn.functional as F

from arena import Defense, Fit, FitTask, hookimpl

LR_SCALE = {scale}


class PlainSGD(Defense):
    """Plain PyTorch on the FitTask helpers: the recipe's batches, optimiser and release."""

    name = "plain-sgd"
    version = "1"
    honours = frozenset({{"epochs", "lr", "batch_size", "momentum", "l2", "ema", "augment"}})

    def fit(self, task: FitTask) -> Fit:
        ensemble = task.ensemble()
        opt = task.optimizer(ensemble)
        for group in opt.param_groups:
            group["lr"] *= LR_SCALE
        for X, y, _ in task.minibatches():
            opt.zero_grad()
            logits = ensemble(X)
            ce = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(y.shape)
            ce.mean(1).sum().backward()
            opt.step()
        return task.finish(ensemble, opt)


@hookimpl
def register_defenses(register):
    register(PlainSGD)
'''

ATTACK = '''
from arena import Attack, MembershipGuess, hookimpl


class LossScore(Attack):
    """Members have lower loss: the score is minus the loss of each challenge point."""

    name = "loss-score"
    game = "membership"
    version = "{version}"
    threat_model = frozenset({{"query"}})

    def run(self, view):
        scores = -view.model.loss(view.challenge_X, view.challenge_y).double().numpy()
        return MembershipGuess(scores=scores, decisions=scores > float(sorted(scores)[len(scores) // 2]))


@hookimpl
def register_attacks(register):
    register(LossScore)
'''

SCENARIO = """
name: stale
seeds: [0, 1]
tracks:
  - name: synth
    dataset: {name: synthetic, n: 600, features: 8, classes: 2}
    model: {name: mlp, hidden: [8]}
    training: {epochs: 2, lr: 0.1, batch_size: 32}
    game: {name: membership, members: 100, test: 100}
    defenses:
      - {name: dpsgd, epsilons: [4], delta: 1.0e-5}
      - {name: plain-sgd}
    attacks:
      - {name: threshold-mia}
      - {name: loss-score}
"""


def _install(plugin_dist, *, scale: float = 1.0, version: str = "1") -> Path:
    plugin_dist("arena-stale-defense", "arena_stale_defense", DEFENSE.format(scale=scale))
    return plugin_dist("arena-stale-attack", "arena_stale_attack", ATTACK.format(version=version))


def _edit(site: Path, module: str, text: str) -> None:
    """Edit an installed plugin's source in place, as a plugin author does in an editable install, and load the
    plugins again (as the next ``arena run`` would)."""
    (site / f"{module}.py").write_text(text)
    sys.modules.pop(module, None)
    forget_registries()
    provenance.clear_cache()


def _run(scenario: Path, out: Path, capsys, *extra: str) -> str:
    # the tests render the report page themselves
    assert main(["run", str(scenario), "--out", str(out), "--serial", "--no-report", *extra]) == 0
    return capsys.readouterr().out


def _models(out: Path) -> set[str]:
    """The trained-model entries of the run directory's cache."""
    return {p.name for p in (out / "cache" / "models").glob("*.safetensors")}


def _assert_only_current(out: Path, expect_rows: int) -> Results:
    """The leaderboard, the frame, the report and the audit read exactly the current matchups: one row each,
    every cell over the 2 seeds (never 4: no old row is averaged in)."""
    results = Results(out)
    current = set(RunStore(out).matchups())
    assert len(current) == 8 and {r["key"] for r in results.rows} == current
    frame = results.frame()
    assert len(frame) == 8 and set(frame["key"]) == current
    (board,) = results.boards()
    assert set(board.cells.index) == {"dpsgd(eps=4)", "plain-sgd"}
    assert set(board.cells.columns) == {"threshold-mia", "loss-score"}
    assert max(g.seeds.get(c, 0) for g in board.grids.values() for c in g.seeds) == 2
    assert all("(n=2)" in cell for cell in board.cells.to_numpy().ravel()), board.cells
    audit = results.audit
    audited = {a.key for a in audit.games["membership"].records}
    assert audit.tested == 4 and audited <= current  # dpsgd × 2 attacks × 2 seeds, the current ones only
    assert "8 matchups: 8 ok" in render_page(RunStore(out))
    assert len(RunStore(out).results()) == expect_rows  # the superseded rows stay in the file
    return results


def _history(out: Path, capsys) -> list[dict[str, str]]:
    assert main(["leaderboard", str(out), "--history", "--format", "csv"]) == 0
    return list(csv.DictReader(io.StringIO(capsys.readouterr().out)))


@pytest.mark.slow
def test_a_bumped_version_replays_its_matchups_and_only_they_count(plugin_dist, tmp_path: Path, capsys) -> None:
    site = _install(plugin_dist)
    scenario = write_scenario(tmp_path / "stale.yaml", SCENARIO)
    out = tmp_path / "run"
    assert "8 matchups: 8 ok, 0 skipped, 0 failed (8 played by this run" in _run(scenario, out, capsys)
    first = {r["key"]: r for r in RunStore(out).results()}
    models = _models(out)
    assert {r["versions"]["attack"].split(" / ")[1] for r in first.values() if r["attack"] == "loss-score"} == \
        {"loss-score v1"}
    assert all(r["versions"]["attack.source"].endswith("(editable)") for r in first.values()
               if r["attack"] == "loss-score"), "the fixture installs in editable mode: its source is hashed"
    assert {"game", "dataset", "model", "defense", "attack"} <= set(next(iter(first.values()))["versions"])

    _edit(site, "arena_stale_attack", ATTACK.format(version="2"))
    printed = _run(scenario, out, capsys)
    assert "8 matchups: 8 ok, 0 skipped, 0 failed (4 played by this run, 4 from earlier runs)" in printed
    rows = RunStore(out).results()
    new = rows[len(first):]
    assert {r["attack"] for r in new} == {"loss-score"} and len(new) == 4  # its 2 defenses × 2 seeds, no more
    assert {r["versions"]["attack"].split(" / ")[1] for r in new} == {"loss-score v2"}
    assert _models(out) == models, "an attack's new version retrains no release"
    assert {r["release_key"] for r in new} <= {r["release_key"] for r in first.values()}

    results = _assert_only_current(out, expect_rows=12)
    assert {r["versions"]["attack"].split(" / ")[1] for r in results.rows if r["attack"] == "loss-score"} == \
        {"loss-score v2"}
    history = _history(out, capsys)
    assert len(history) == 12
    superseded = [h for h in history if h["superseded"] == "True"]
    assert len(superseded) == 4 and {h["attack_label"] for h in superseded} == {"loss-score"}
    assert {h["versions.attack"].split(" / ")[1] for h in superseded} == {"loss-score v1"}
    assert {h["key"] for h in superseded} == {k for k, r in first.items() if r["attack"] == "loss-score"}

    _edit(site, "arena_stale_attack", ATTACK.format(version="1"))  # back to v1: its old rows are current again
    assert "(0 played by this run, 8 from earlier runs)" in _run(scenario, out, capsys)
    assert {r["key"] for r in Results(out).rows} == set(first)


@pytest.mark.slow
def test_an_edited_editable_plugin_retrains_what_it_changes_and_fresh_retrains_all(plugin_dist, tmp_path: Path,
                                                                                   capsys) -> None:
    site = _install(plugin_dist)
    scenario = write_scenario(tmp_path / "stale.yaml", SCENARIO)
    out = tmp_path / "run"
    _run(scenario, out, capsys)
    first = RunStore(out).results()
    models = _models(out)
    old_source = {r["versions"]["defense.source"] for r in first if r["defense"] == "plain-sgd"}

    _edit(site, "arena_stale_defense", DEFENSE.format(scale=0.0))  # lr × 0: the models stay at their init
    printed = _run(scenario, out, capsys)
    assert "(4 played by this run, 4 from earlier runs)" in printed
    new = RunStore(out).results()[len(first):]
    assert {r["defense"] for r in new} == {"plain-sgd"} and len(new) == 4  # 2 attacks × 2 seeds
    assert {r["versions"]["defense"] for r in new} == {r["versions"]["defense"] for r in first
                                                        if r["defense"] == "plain-sgd"}, "same version"
    assert {r["versions"]["defense.source"] for r in new}.isdisjoint(old_source)
    trained = _models(out) - models
    assert len(trained) == 2, "one new release per seed of the edited defense, nothing else retrained"
    before = {r["seed"]: r["utility"] for r in first if r["defense"] == "plain-sgd"}
    after = {r["seed"]: r["utility"] for r in new}
    assert after != before, "the edit took effect: the cached models of the old code were not reused"

    results = _assert_only_current(out, expect_rows=12)
    assert {r["versions"]["defense.source"] for r in results.rows if r["defense"] == "plain-sgd"} == \
        {r["versions"]["defense.source"] for r in new}
    assert sum(h["superseded"] == "True" for h in _history(out, capsys)) == 4

    printed = _run(scenario, out, capsys, "--fresh")
    assert "(8 played by this run, 0 from earlier runs)" in printed  # --fresh: every matchup again
    assert len(RunStore(out).results()) == 20
    assert len(_models(out)) == 4, "the cache was discarded and every release trained again"
    _assert_only_current(out, expect_rows=20)
