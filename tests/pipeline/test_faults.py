"""Faults are matchup failures: a plugin that exits, kills its process, raises KeyboardInterrupt or outlives its
timeout while catching every BaseException fails its own matchup, serially as under Ray, and the run goes on;
under Ray a release that outlives its matchup's timeout is stopped.
A defense whose claim exceeds its configured ε fails; logistic regression without a penalty trains."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from arena.cli import main
from arena.pipeline.store import RunStore
from tests.conftest import write_scenario

SMALL = """
name: small
seeds: [0]
timeout: 120
retries: 0
tracks:
  - name: syn
    dataset: {name: synthetic, n: 300, features: 8}
    model: {name: logreg}
    training: {epochs: 2, batch_size: 32, lr: 0.1}
    game: {name: membership, members: 20, test: 50}
    defenses:
      - {name: nonprivate}
    attacks:
      - {name: threshold-mia}
"""

FAULTS = """
import os
import signal
import sys
import time
from typing import Literal

from arena.contracts.attack import Attack
from arena.hookspecs import hookimpl
from arena.contracts.params import PluginParams
from arena_plugins.defenses import NonPrivate


def fault(kind):
    if kind == "explode":
        raise RuntimeError("boom from a plugin")
    if kind == "exit0":
        sys.exit(0)
    if kind == "hard-exit":
        os._exit(1)
    if kind == "interrupt":
        raise KeyboardInterrupt
    if kind == "killed":  # the process playing it dies of a signal, as under the OOM killer
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)
    while True:  # "greedy": catches everything, timeouts included
        try:
            time.sleep(0.05)
        except BaseException:
            pass


class Explode(Attack):
    name = "explode"
    game = "membership"

    def run(self, view):
        fault("explode")


class Exit0(Attack):
    name = "exit0"
    game = "membership"

    def run(self, view):
        fault("exit0")


class HardExit(Attack):
    name = "hard-exit"
    game = "membership"

    def run(self, view):
        fault("hard-exit")


class Interrupt(Attack):
    name = "interrupt"
    game = "membership"

    def run(self, view):
        fault("interrupt")


class Killed(Attack):
    name = "killed"
    game = "membership"

    def run(self, view):
        fault("killed")


class Greedy(Attack):
    name = "greedy"
    game = "membership"

    def run(self, view):
        fault("greedy")


class FaultyParams(PluginParams):
    fault: Literal["none", "explode", "exit0", "hard-exit", "interrupt", "killed", "greedy"] = "none"


class Faulty(NonPrivate):  # the fault strikes while training the release, in the process playing the matchup
    name = "faulty"
    Params = FaultyParams

    def fit(self, task):
        if self.params.fault != "none":
            fault(self.params.fault)
        return super().fit(task)


@hookimpl
def register_attacks(register):
    for cls in (Explode, Exit0, HardExit, Interrupt, Killed, Greedy):
        register(cls)


@hookimpl
def register_defenses(register):
    register(Faulty)
"""

LIAR = """
from pydantic import BaseModel, ConfigDict, Field

from arena.contracts.defense import Claim, Defense, Fit
from arena.engine.trainer import train
from arena.hookspecs import hookimpl


class LiarParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    epsilons: list[float] = Field(min_length=1)


class Liar(Defense):
    name = "liar"
    Params = LiarParams

    def target_epsilon(self):
        return self.params.epsilons[0]

    def target_delta(self):
        return 1e-5

    def fit(self, task):
        state = train(task.arch, task.X, task.y, task.recipe, task.init_seeds, task.train_seeds)
        return Fit(state, Claim(epsilon=1000.0, delta=1e-5, accountant="made up", target_epsilon=1.0))


@hookimpl
def register_defenses(register):
    register(Liar)
"""


def attacks_scenario(path: Path, attacks: list[str]) -> Path:
    return write_scenario(path, SMALL.replace("      - {name: threshold-mia}",
                                              "\n".join(f"      - {{name: {a}}}" for a in attacks)))


FAULTY = ["explode", "exit0", "hard-exit", "interrupt", "killed", "greedy"]
DEFENSE_FAULTS = ["explode", "exit0", "hard-exit", "interrupt", "killed", "greedy"]


PATIENT = 180
"""The timeout of every matchup that must end by itself. Its clock runs from the start of its process (under Ray,
from its submission: a worker's start and its release's training count too), which a loaded machine makes many
times slower (60 s was too short under Ray at a load of 13 on 2 cores)."""
HUNG = 10
"""The timeout of the greedy plugins, which never end by themselves. They play in a scenario of their own, on
another seed (another release: their timeout, which may strike while their release trains, stops no other's)."""


def faults_text(name: str, seed: int, timeout: float, attacks: list[str], defense_faults: list[str],
                retries: int = 0) -> str:
    """Scenario ``name``: track syn plays ``attacks`` against an honest release; track syn-defenses plays an
    honest attack against a faulty defense per fault in ``defense_faults`` (its fault strikes while its release
    trains; "none": the honest nonprivate)."""
    text = SMALL.replace("name: small\n", f"name: {name}\n", 1).replace("seeds: [0]", f"seeds: [{seed}]", 1).replace(
        "timeout: 120", f"timeout: {timeout:g}", 1).replace("retries: 0", f"retries: {retries}", 1)
    syn = text.replace("      - {name: threshold-mia}", "\n".join(f"      - {{name: {a}}}" for a in attacks))
    defenses = "\n".join("      - {name: nonprivate}" if f == "none" else f"      - {{name: faulty, fault: {f}}}"
                         for f in defense_faults)
    track = text[text.index("  - name: syn"):].replace("name: syn\n", "name: syn-defenses\n", 1)
    return syn + track.replace("      - {name: nonprivate}", defenses)


def faults_scenarios(folder: Path, retries: int = 0) -> list[Path]:
    """Every faulty attack against an honest release and every faulty defense against an honest attack, one
    honest matchup on each track; the greedy ones in a scenario of their own with the short timeout ``HUNG``."""
    ending = [f for f in FAULTY if f != "greedy"]
    return [write_scenario(folder / "faults.yaml", faults_text("small", 0, PATIENT, [*ending, "threshold-mia"],
                                                              [*ending, "none"], retries)),
            write_scenario(folder / "greedy.yaml", faults_text("small-greedy", 1, HUNG, ["greedy"], ["greedy"],
                                                               retries))]


def check_fault_rows(out: Path) -> dict[tuple[str, str], dict]:
    """Every matchup has its row (the run went on), the honest ones ok, each faulty one failed with its cause."""
    def defense(r: dict) -> str:  # not the label, which names only what differs within its scenario
        return f"faulty(fault={r['defense_params']['fault']})" if r["defense"] == "faulty" else r["defense"]

    rows = {(r["track"], defense(r) if r["track"] == "syn-defenses" else r["attack"]): r
            for r in RunStore(out).results() if r["scenario"] in ("small", "small-greedy")}
    attack_keys = {("syn", a) for a in [*FAULTY, "threshold-mia"]}
    defense_keys = {("syn-defenses", f"faulty(fault={f})") for f in DEFENSE_FAULTS} | {("syn-defenses", "nonprivate")}
    assert set(rows) == attack_keys | defense_keys, sorted(rows)
    assert rows["syn", "threshold-mia"]["status"] == "ok", rows["syn", "threshold-mia"]["error"]
    assert rows["syn-defenses", "nonprivate"]["status"] == "ok", rows["syn-defenses", "nonprivate"]["error"]
    for key, row in rows.items():
        if key[1] not in ("threshold-mia", "nonprivate"):
            assert row["status"] == "failed", (key, row["error"])
            assert row["error"], key
    assert rows["syn", "greedy"]["error"] == f"timeout: exceeded {HUNG}s"
    assert rows["syn-defenses", "faulty(fault=greedy)"]["error"] == f"timeout: exceeded {HUNG}s"
    assert rows["syn", "killed"]["error"] == "worker died: exit code -9"
    for explode in (("syn", "explode"), ("syn-defenses", "faulty(fault=explode)")):  # an ordinary exception
        assert "boom from a plugin" in rows[explode]["error"] and "Traceback" in rows[explode]["traceback"]
    return rows


def test_serial_faults_fail_only_their_own_matchups(plugin_dist, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("ARENA_TRUSTED", "arena-faults")  # attacks and defenses in one distribution: trusted by name
    plugin_dist("arena-faults", "arena_faults_plugin", FAULTS)
    paths = faults_scenarios(tmp_path)
    out = tmp_path / "run"
    handler, timer = signal.getsignal(signal.SIGALRM), signal.getitimer(signal.ITIMER_REAL)
    assert main(["run", *map(str, paths), "--out", str(out), "--serial", "--no-report"]) == 1
    rows = check_fault_rows(out)
    # the greedy ones were stopped at their timeout, from outside their process: the caller's alarm (pytest-timeout's)
    # is untouched
    for greedy in (("syn", "greedy"), ("syn-defenses", "faulty(fault=greedy)")):
        assert HUNG <= rows[greedy]["seconds"] < 2 * HUNG, rows[greedy]["seconds"]
    assert signal.getsignal(signal.SIGALRM) is handler
    assert (signal.getitimer(signal.ITIMER_REAL)[0] > 0) == (timer[0] > 0)
    for track, exit0, hard_exit, interrupt, killed in (
            ("syn", "exit0", "hard-exit", "interrupt", "killed"),
            ("syn-defenses", "faulty(fault=exit0)", "faulty(fault=hard-exit)", "faulty(fault=interrupt)",
             "faulty(fault=killed)")):
        assert rows[track, exit0]["error"] == "plugin raised SystemExit: 0"
        assert rows[track, hard_exit]["error"] == "worker died: exit code 1"
        assert rows[track, interrupt]["error"].startswith("plugin raised KeyboardInterrupt")
        assert rows[track, killed]["error"] == "worker died: exit code -9"
    printed = capsys.readouterr().out
    assert "2 ok, 0 skipped, 12 failed" in printed


def greedy_release_scenarios(folder: Path) -> list[Path]:
    """Two honest attacks on an honest release, then on a greedy defense's (with the short timeout ``HUNG``), then
    on another honest defense's: three scenarios, played in this order, on seed 2 (releases of their own)."""
    def one(name: str, timeout: float, defense: str) -> Path:
        text = SMALL.replace("name: small\n", f"name: {name}\n", 1).replace("timeout: 120", f"timeout: {timeout:g}", 1)
        text = text.replace("seeds: [0]", "seeds: [2]", 1)
        text = text.replace("      - {name: nonprivate}", f"      - {defense}").replace(
            "      - {name: threshold-mia}",
            "      - {name: threshold-mia}\n      - {name: threshold-mia, signal: confidence}")
        return write_scenario(folder / f"release-{name}.yaml", text)

    return [one("before", PATIENT, "{name: nonprivate}"), one("greedy", HUNG, "{name: faulty, fault: greedy}"),
            one("after", PATIENT, "{name: faulty}")]


def test_ray_faults_fail_only_their_own_matchups_and_a_greedy_release_is_stopped(plugin_dist, tmp_path: Path,
                                                                                capsys, monkeypatch) -> None:
    """Under Ray (one run, one Ray start, for both): every fault fails its own matchup, as
    serially. And a defense catching every BaseException while it trains keeps its release task busy past the
    timeout. With one worker, that task held the only CPU for the rest of the run, and every later honest matchup
    timed out; trained ahead of its turn, it starved the honest matchups before it too. The release now trains only
    with its first matchup's clock running and is stopped with it, and the matchups queued on it fail at once."""
    import ray

    monkeypatch.setenv("ARENA_TRUSTED", "arena-faults")  # attacks and defenses in one distribution
    plugin_dist("arena-faults", "arena_faults_plugin", FAULTS)
    paths = [*faults_scenarios(tmp_path), *greedy_release_scenarios(tmp_path)]
    out = tmp_path / "run"
    try:
        assert main(["run", *map(str, paths), "--out", str(out), "--workers", "1", "--no-report"]) == 1
    finally:
        ray.shutdown()
    rows = check_fault_rows(out)
    assert not [r["error"] for r in rows.values() if r["error"] and "x1b" in r["error"]], "Ray's colour codes"
    release = {(r["scenario"], r["attack_label"]): r for r in RunStore(out).results()
               if r["scenario"] in ("before", "greedy", "after")}
    assert len(release) == 6
    greedy = [row["error"] for (scenario, _), row in release.items() if scenario == "greedy"]
    assert sorted(greedy) == [f"timeout: exceeded {HUNG}s", f"timeout: its release did not finish within {HUNG}s"]
    honest = {key: row["error"] for key, row in release.items() if key[0] != "greedy"}
    assert len(honest) == 4 and not any(honest.values()), honest  # before and after the greedy release
    printed = capsys.readouterr().out
    assert "6 ok, 0 skipped, 14 failed" in printed and "FAILED" in printed, printed


def test_a_claim_above_the_configured_epsilon_fails_its_matchup(plugin_dist, tmp_path: Path, capsys) -> None:
    plugin_dist("arena-liar", "arena_liar_plugin", LIAR)
    path = write_scenario(tmp_path / "liar.yaml", SMALL.replace("{name: nonprivate}", "{name: liar, epsilons: [1]}"))
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--serial", "--no-report"]) == 1
    (row,) = RunStore(out).results()
    assert row["status"] == "failed"
    assert row["error"] == "claim: the release claims ε = 1000, above its configuration's target ε = 1"
    assert row["claim"]["epsilon"] == 1000.0
    printed = capsys.readouterr().out
    assert "claimed ε" in printed and "1000" in printed
    assert main(["leaderboard", str(out), "--format", "json"]) == 0
    (board,) = json.loads(capsys.readouterr().out)
    assert board["claimed_epsilon"] == {"liar(eps=1)": 1000.0}, "the leaderboard shows the claimed ε"


def test_claim_problem_allows_the_target_and_below() -> None:
    from arena.contracts.defense import Claim
    from arena.pipeline.execute import claim_problem

    assert claim_problem(None, None) is None
    assert claim_problem(Claim(epsilon=0.99, delta=1e-5, accountant="rdp"), 1.0) is None
    assert claim_problem(Claim(epsilon=1.0 + 1e-12, delta=1e-5, accountant="rdp"), 1.0) is None
    assert "above" in claim_problem(Claim(epsilon=1.01, delta=1e-5, accountant="rdp"), 1.0)
    assert "claims nothing" in claim_problem(None, 1.0)


DIGITS_LOGREG = """
name: unpenalised
seeds: [0]
tracks:
  - name: digits-logreg
    dataset: {name: digits}
    model: {name: logreg}
    training: {epochs: 20, batch_size: 32, lr: 0.5}
    game: {name: membership, members: 50, test: 100}
    defenses:
      - {name: nonprivate}
    attacks:
      - {name: threshold-mia}
"""


def test_unpenalised_logreg_on_digits_trains_by_gradient_steps(tmp_path: Path) -> None:
    path = write_scenario(tmp_path / "logreg.yaml", DIGITS_LOGREG)
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--serial", "--no-report"]) == 0
    (row,) = RunStore(out).results()
    assert row["status"] == "ok", row["error"]
    assert row["utility"] > 0.5, "well above chance (0.1)"


def test_newton_without_a_penalty_is_a_validation_error(tmp_path: Path, capsys) -> None:
    path = write_scenario(tmp_path / "newton.yaml", DIGITS_LOGREG.replace("lr: 0.5}", "lr: 0.5, solver: newton}"))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: tracks[0].training.solver: 'newton' needs model.l2 > 0" in err
    assert "Traceback" not in err
    penalised = write_scenario(tmp_path / "penalised.yaml",
                               DIGITS_LOGREG.replace("lr: 0.5}", "lr: 0.5, solver: newton}")
                               .replace("{name: logreg}", "{name: logreg, l2: 0.01}"))
    assert main(["validate", str(penalised)]) == 0


@pytest.mark.parametrize("solver", ["auto", "gradient"])
def test_unpenalised_logreg_fit_does_not_call_newton(solver: str, monkeypatch) -> None:
    import torch

    import arena_plugins.defenses as defenses
    from arena.contracts.defense import FitTask
    from arena.contracts.spec import Track
    from arena.engine.recipe import Recipe
    from arena.pipeline.plan import architecture

    def refuse(*args, **kwargs):
        raise AssertionError("Newton must not run without a penalty")

    monkeypatch.setattr(defenses, "fit_logreg", refuse)
    track = Track.model_validate({
        "name": "t", "dataset": {"name": "digits"}, "model": {"name": "logreg"},
        "training": {"epochs": 1, "lr": 0.1}, "game": {"name": "membership", "members": 10},
        "defenses": [{"name": "nonprivate"}], "attacks": [{"name": "threshold-mia"}]})
    from arena.pipeline.plan import load_dataset

    data = load_dataset(track.dataset)
    arch = architecture(track, data)
    X = torch.from_numpy(data.X[:40]).unsqueeze(0)
    X[..., 0] = 0.0  # a constant pixel: the unpenalised Newton system is singular
    task = FitTask(arch=arch, recipe=Recipe(epochs=1, lr=0.1), X=X, y=torch.from_numpy(data.y[:40]).unsqueeze(0),
                   init_seeds=torch.zeros(1, dtype=torch.int64), train_seeds=torch.ones(1, dtype=torch.int64),
                   solver=solver)
    fit = defenses.NonPrivate(defenses.NonPrivate.Params()).fit(task)
    assert fit.claim is None
