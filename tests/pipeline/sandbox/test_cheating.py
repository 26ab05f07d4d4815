"""Cheating attacks (``tests/cheaters.py``) against a non-private model that honest LiRA attacks successfully.

Each route is shown to work where it would (in the game's process, or with the scenario seed as the game's seed,
as before the run secret), then shown to fail where attacks actually run: in ``arena.pipeline.sandbox`` with the game
keyed by the run's secret, and through the tournament. "Fail" means: the matchup fails with the error that
blocked the route (a threat-model error, a permission error), or the guess is at chance (AUC within 0.5 ± 0.1 on
200 challenge points; a reconstruction no better than the guesses that ignore the model, κ).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from arena.contracts.spec import PluginRef
from arena.engine.recipe import Recipe
from arena.games.membership import MembershipGame, MembershipGameSpec
from arena.games.reconstruction import ReconstructionGame, ReconstructionGameSpec
from arena.pipeline.plan import load_dataset
from arena.pipeline.procedure import TrainingProcedure
from arena.pipeline.sandbox import AttackFailed, guess_types, run_attack
from arena.pipeline.store import SECRET_ENV, RunStore, challenger_seed
from arena_plugins.defenses import NonPrivate
from arena_plugins.membership import LiRA
from tests import cheaters
from tests.conftest import TEST_SECRET, architecture

pytestmark = pytest.mark.slow  # the module's setting trains its releases for seconds, before any test

SCENARIO_SEED = 3
CHANCE = 0.1
BLOCKED = ("ThreatModelError", "PermissionError")


class Setting:
    """One run directory (world-traversable parent, so only its own mode protects it), a membership game keyed
    by the run's secret on digits with 100 members (200 challenge points) and its non-private release; the same
    for the reconstruction game."""

    def __init__(self, base: Path) -> None:
        self.store = RunStore(base / "run")
        self.secret = self.store.secret()
        self.seed = challenger_seed(self.secret, SCENARIO_SEED)
        dataset = load_dataset(PluginRef(name="digits"))
        self.game = MembershipGame(MembershipGameSpec(name="membership", members=100, test=100, population=200),
                                   dataset, self.seed)
        self.procedure = TrainingProcedure(
            NonPrivate(NonPrivate.Params()), architecture("mlp", (1, 8, 8), 10, hidden=[64]),
            Recipe(epochs=50, lr=0.1, momentum=0.9, batch_size=32), cache=self.store.cache)
        self.release = self.game.release(self.procedure)
        self.recon = ReconstructionGame(
            ReconstructionGameSpec(name="reconstruction", fixed=100, targets=10, shadow_targets=50, test=100),
            dataset, self.seed)
        self.recon_procedure = TrainingProcedure(
            NonPrivate(NonPrivate.Params()), architecture("logreg", (1, 8, 8), 10, l2=1e-3),
            Recipe(epochs=1, lr=0.1, batch_size=32), cache=self.store.cache)
        self.recon_release = self.recon.release(self.recon_procedure)

    def membership(self, game: MembershipGame, attack, *, sandbox: bool) -> dict:
        view = game.view(attack, self.release, self.procedure)
        guess = sandboxed(attack, view, game) if sandbox else attack.run(view)
        return game.score(attack, guess).metrics

    def reconstruction(self, game: ReconstructionGame, attack, *, sandbox: bool) -> dict:
        view = game.view(attack, self.recon_release, self.recon_procedure)
        guess = sandboxed(attack, view, game) if sandbox else attack.run(view)
        return game.score(attack, guess).metrics


def sandboxed(attack, view, game):
    """``attack``'s guess from the sandbox, which gets its class and parameters only (and builds it itself)."""
    return run_attack(type(attack), view, params=attack.params.model_dump(mode="json"), guesses=guess_types(game))


@pytest.fixture(scope="module")
def setting() -> Iterator[Setting]:
    with pytest.MonkeyPatch.context() as mp:
        base = Path(tempfile.mkdtemp(prefix="arena-cheating-"))
        base.chmod(0o755)  # anyone may traverse it: the run directory's own mode must keep the attack out
        mp.setenv(SECRET_ENV, TEST_SECRET)  # one secret, so the honest LiRA's AUC is the same on every machine
        made = Setting(base)
        mp.delenv(SECRET_ENV)  # then only the run directory holds it, as in a real run
        yield made
        shutil.rmtree(base, ignore_errors=True)


def test_honest_lira_succeeds_in_this_setting_in_the_sandbox(setting: Setting) -> None:
    lira = LiRA(LiRA.Params(shadows=16))
    auc = setting.membership(setting.game, lira, sandbox=True)["auc"]
    assert auc > 0.5 + 2 * CHANCE, f"LiRA's AUC {auc:.3f}: the setting must leak for the cheats' failures to mean much"
    assert auc == setting.membership(setting.game, lira, sandbox=False)["auc"], "the sandbox changes no answer"


# --- in the game's process, the routes work ---


@pytest.mark.parametrize("cls", [cheaters.StackFrame, cheaters.GcWalk, cheaters.CachePath])
def test_in_process_the_interpreter_and_the_cache_give_the_membership_away(setting: Setting, cls) -> None:
    attack = cls(cls.Params())
    assert setting.game.play(attack, setting.release, setting.procedure).metrics["auc"] == 1.0


def test_in_process_a_query_only_attack_reaches_the_parameters(setting: Setting) -> None:
    metrics = setting.membership(setting.game, cheaters.ParamsPeek(cheaters.ParamsPeek.Params()), sandbox=False)
    assert metrics["auc"] > 0.55, "a loss attack on parameters it was never granted"


def test_in_process_the_environment_and_the_run_directory_give_the_secret_away(setting: Setting,
                                                                               monkeypatch) -> None:
    monkeypatch.setenv(SECRET_ENV, setting.secret.hex())
    monkeypatch.setenv(cheaters.RUN_DIR_HINT, str(setting.store.root))
    for cls in (cheaters.EnvironmentSecret, cheaters.RunDirectory):
        assert setting.membership(setting.game, cls(cls.Params()), sandbox=False)["auc"] == 1.0, cls.name


@pytest.mark.parametrize("cls", [cheaters.SeedBruteForce, cheaters.SplitRebuild])
def test_a_game_seeded_by_the_scenario_seed_alone_is_rebuilt_from_the_view(setting: Setting, cls) -> None:
    """What every run was before the secret: the split follows from the view in well under a second."""
    exposed = MembershipGame(setting.game.spec, setting.game.dataset, SCENARIO_SEED)
    assert setting.membership(exposed, cls(cls.Params()), sandbox=False)["auc"] == 1.0
    keyed = setting.membership(setting.game, cls(cls.Params()), sandbox=False)["auc"]
    assert keyed == 0.5, "keyed by the secret, no seed tried rebuilds the challenge"


def test_in_process_reconstruction_targets_follow_from_the_seed_or_the_heap(setting: Setting) -> None:
    exposed = ReconstructionGame(setting.recon.spec, setting.recon.dataset, SCENARIO_SEED)
    seed_cheat = cheaters.ReconstructionSeed(cheaters.ReconstructionSeed.Params())
    assert setting.reconstruction(exposed, seed_cheat, sandbox=False)["success_rate"] == 1.0
    keyed = setting.reconstruction(setting.recon, seed_cheat, sandbox=False)  # wrong targets: chance (near-duplicates)
    assert keyed["success_rate"] <= keyed["kappa"] + CHANCE, keyed
    gc_cheat = cheaters.ReconstructionGc(cheaters.ReconstructionGc.Params())
    assert setting.reconstruction(setting.recon, gc_cheat, sandbox=False)["success_rate"] == 1.0


# --- in the sandbox, every route fails ---


def at_chance_or_blocked(run) -> str:
    """'blocked: <error>' or 'chance: AUC'; fails the test when the cheat got anywhere."""
    try:
        metrics = run()
    except AttackFailed as exc:
        assert str(exc).startswith(BLOCKED), f"blocked, but not by the sandbox: {exc}"
        return f"blocked: {exc}"
    if "auc" in metrics:
        assert abs(metrics["auc"] - 0.5) <= CHANCE, metrics
        return f"chance: AUC {metrics['auc']:.3f}"
    assert metrics["success_rate"] <= metrics["kappa"] + CHANCE, metrics
    return f"chance: success {metrics['success_rate']:.3f}, kappa {metrics['kappa']:.3f}"


NEEDS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="without root the sandbox cannot change user, so the "
                                "run directory and the parent's /proc entries stay readable (README, Reliability)")
MEMBERSHIP = [pytest.param(c, id=c.name, marks=[NEEDS_ROOT] if c in (cheaters.RunDirectory, cheaters.ParentMemory,
                                                                     cheaters.EnvironmentSecret) else [])
              for c in cheaters.MEMBERSHIP]


@pytest.mark.parametrize("cls", MEMBERSHIP)
def test_in_the_sandbox_no_membership_route_beats_chance(setting: Setting, cls, monkeypatch) -> None:
    monkeypatch.setenv(SECRET_ENV, setting.secret.hex())  # in the arena's environment, never in the attack's
    monkeypatch.setenv(cheaters.RUN_DIR_HINT, str(setting.store.root))
    at_chance_or_blocked(lambda: setting.membership(setting.game, cls(cls.Params()), sandbox=True))


@pytest.mark.parametrize("cls", cheaters.RECONSTRUCTION, ids=lambda c: c.name)
def test_in_the_sandbox_no_reconstruction_route_beats_the_prior(setting: Setting, cls) -> None:
    at_chance_or_blocked(lambda: setting.reconstruction(setting.recon, cls(cls.Params()), sandbox=True))


# --- through the tournament: the game keyed by the run's secret, every attack in the sandbox ---

SCENARIO = """
name: cheating
seeds: [3]
timeout: 600
tracks:
  - name: digits-mlp
    dataset: {name: digits}
    model: {name: mlp, hidden: [64], activation: relu}
    training: {epochs: 50, batch_size: 32, lr: 0.1, momentum: 0.9}
    game: {name: membership, members: 100, test: 100, population: 200}
    defenses:
      - {name: nonprivate}
    attacks:
%s
  - name: digits-reconstruction
    dataset: {name: digits}
    model: {name: logreg, l2: 0.001}
    training: {epochs: 1, lr: 0.1}
    game: {name: reconstruction, fixed: 100, targets: 10, shadow_targets: 50, test: 100}
    defenses:
      - {name: nonprivate}
    attacks:
%s
"""


def cheating_run(plugin_dist, tmp_path: Path, monkeypatch, membership: list[str],
                 reconstruction: list[str],
                 *, serial: bool) -> dict[str, dict]:
    from arena.api import run
    from tests.conftest import write_scenario

    plugin_dist("arena-cheaters", "arena_cheaters", Path(cheaters.__file__).read_text())
    base = Path(tempfile.mkdtemp(prefix="arena-cheating-run-"))
    base.chmod(0o755)  # the run directory's path is known and its parent open: only its own mode protects it
    out = base / "run"
    monkeypatch.delenv(SECRET_ENV, raising=False)
    monkeypatch.setenv(cheaters.RUN_DIR_HINT, str(out))
    listing = ["\n".join(f"      - {{name: {a}}}" for a in names) for names in (membership, reconstruction)]
    scenario = write_scenario(tmp_path / "cheating.yaml", SCENARIO % tuple(listing))
    try:
        run(scenario, out, serial=serial, workers=2, report=False)
        return {r["attack"]: r for r in RunStore(out).results()}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def check_row(row: dict) -> None:
    """A cheat's row: failed, blocked by the sandbox; or ok at chance."""
    if row["status"] == "failed":
        assert row["error"].startswith(BLOCKED), row["error"]
    else:
        assert row["status"] == "ok", row
        m = row["metrics"]
        if "auc" in m:
            assert abs(m["auc"] - 0.5) <= CHANCE, (row["attack"], m["auc"])
        else:
            assert m["success_rate"] <= m["kappa"] + CHANCE, (row["attack"], m)


def test_through_the_serial_tournament_every_cheat_fails_where_honest_lira_succeeds(plugin_dist, tmp_path: Path,
                                                                                    monkeypatch) -> None:
    names = [c.name for c in cheaters.MEMBERSHIP]
    rows = cheating_run(plugin_dist, tmp_path, monkeypatch, ["lira, shadows: 16", *names],
                        [c.name for c in cheaters.RECONSTRUCTION], serial=True)
    assert set(rows) == {"lira", *names, *(c.name for c in cheaters.RECONSTRUCTION)}
    # the run draws its own secret, so the honest AUC varies with it (16 secrets: 0.70-0.81, median 0.78; 0.661 seen
    # once in a full suite): above the cheats' band of chance, which it clears by far, not always above 0.7
    assert rows["lira"]["status"] == "ok" and rows["lira"]["metrics"]["auc"] > 0.5 + CHANCE, rows["lira"]
    assert rows["lira"]["seed"] == SCENARIO_SEED, "rows keep the scenario seed"
    for name, row in rows.items():
        if name != "lira":
            check_row(row)
    assert rows["cheat-params-peek"]["error"].startswith("ThreatModelError")
    assert rows["cheat-cache-path"]["error"].startswith("ThreatModelError")
    if os.geteuid() == 0:
        assert rows["cheat-run-dir"]["error"].startswith("PermissionError")
        assert rows["cheat-parent-memory"]["error"].startswith("PermissionError")


def test_through_ray_the_interpreter_routes_fail_too(plugin_dist, tmp_path: Path, monkeypatch) -> None:
    import ray

    try:
        rows = cheating_run(plugin_dist, tmp_path, monkeypatch,
                            ["cheat-stack-frame", "cheat-gc", "cheat-env-secret", "cheat-run-dir"],
                            ["cheat-recon-gc"], serial=False)
    finally:
        ray.shutdown()
    assert len(rows) == 5
    for row in rows.values():
        check_row(row)
