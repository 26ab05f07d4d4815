"""Plugin loading through real entry points: third-party distributions, duplicates, misspelt hooks, restriction;
one registration style (classes) for every kind, and a clear error for an instance or a wrong class: the
distribution is broken (``arena plugins`` says why), and a scenario that names what it registers is exit 2."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

import arena.pipeline  # noqa: F401 - the sandbox's catalog, as every command has it
from arena.cli import EXIT_INPUT, main
from arena.plugins import build_registries, registries
from arena.registry import UnknownNameError
from tests.conftest import TINY, write_scenario

THIRD_PARTY = """
from arena import Attack, MembershipGuess, hookimpl


class Coin(Attack):
    name = "coin-flip"
    game = "membership"
    version = "3"
    threat_model = frozenset({"query"})

    def run(self, view):
        import numpy as np
        scores = np.zeros(len(view.challenge_y))
        return MembershipGuess(scores, scores > 0)


@hookimpl
def register_attacks(register):
    register(Coin)
"""


def problem(distribution: str) -> str:
    """Why ``distribution`` is broken: the registries load without it."""
    regs = build_registries()
    (found,) = [d for d in regs.distributions if d.name == distribution]
    assert found.zone == "broken" and not any(p.distribution == distribution for p in regs.plugins), found
    return found.problem


def test_builtins_load_through_entry_points() -> None:
    regs = registries()
    assert {"nonprivate", "dpsgd"} <= set(regs.defenses.names())
    assert "threshold-mia" in regs.attacks
    assert {"digits", "breast_cancer", "synthetic", "mnist", "cifar10"} <= set(regs.datasets.names())
    assert all(p.distribution == "privacy-arena" for p in regs.plugins)
    assert regs.defenses.entry("dpsgd").distribution == "privacy-arena"


def test_third_party_distribution_is_loaded_with_its_name_and_version(plugin_dist) -> None:
    plugin_dist("arena-coin", "arena_coin_plugin", THIRD_PARTY, version="2.5")
    regs = build_registries()
    entry = regs.attacks.entry("coin-flip")
    assert (entry.distribution, entry.version) == ("arena-coin", "2.5")
    assert any(p.distribution == "arena-coin" and p.module == "arena_coin_plugin" for p in regs.plugins)


def test_restriction_variable_keeps_builtins_and_listed_distributions_only(plugin_dist, monkeypatch) -> None:
    plugin_dist("arena-coin", "arena_coin_plugin", THIRD_PARTY)
    monkeypatch.setenv("ARENA_LOAD_PLUGINS", "someone-else")
    regs = build_registries()
    assert "coin-flip" not in regs.attacks and "threshold-mia" in regs.attacks
    monkeypatch.setenv("ARENA_LOAD_PLUGINS", "arena-coin")
    assert "coin-flip" in build_registries().attacks


def test_duplicate_name_is_an_error_naming_both_plugins(plugin_dist) -> None:
    plugin_dist("arena-dup", "arena_dup_plugin", """
        from arena.hookspecs import hookimpl
        from arena_plugins.membership import ThresholdMIA

        class Again(ThresholdMIA):
            pass

        @hookimpl
        def register_attacks(register):
            register(Again)
    """)
    message = problem("arena-dup")
    assert "threshold-mia" in message
    assert "privacy-arena:membership_attacks" in message and "arena-dup:arena_dup_plugin" in message


def test_misspelt_hook_is_a_load_error(plugin_dist) -> None:
    plugin_dist("arena-typo", "arena_typo_plugin", """
        from arena.hookspecs import hookimpl

        @hookimpl
        def register_attack(register):
            pass
    """)
    assert "unknown hook 'register_attack'" in problem("arena-typo")


def test_wrong_hook_argument_is_a_load_error(plugin_dist) -> None:
    plugin_dist("arena-args", "arena_args_plugin", """
        from arena.hookspecs import hookimpl

        @hookimpl
        def register_attacks(register, extra):
            pass
    """)
    assert "extra" in problem("arena-args")


def test_registering_a_non_attack_is_rejected(plugin_dist) -> None:
    plugin_dist("arena-bad", "arena_bad_plugin", """
        from arena.hookspecs import hookimpl

        class NotAnAttack:
            name = "nope"

        @hookimpl
        def register_attacks(register):
            register(NotAnAttack)
    """)
    assert problem("arena-bad") == ("plugin 'arena-bad:arena_bad_plugin' registered the class NotAnAttack as an "
                                    "attack, but it is not a subclass of arena.Attack; register a subclass of "
                                    "arena.Attack")


# Per kind: a plugin that registers an instance where the class belongs (for metrics, declarations: the class where
# an instance belongs), and the registry's whole answer.
MISTAKES = {
    "game": ("""
        from arena import MembershipGame, hookimpl

        class Mine(MembershipGame):
            name = "mine"

        @hookimpl
        def register_games(register):
            register(Mine.__new__(Mine))
    """, "registered an instance of Mine as a game; register the class itself: register(Mine)"),
    "dataset": ("""
        from arena import DatasetLoader, hookimpl

        class Stripes(DatasetLoader):
            name = "stripes"

            def load(self, params):
                raise NotImplementedError("never loaded: its registration is the mistake")

        @hookimpl
        def register_datasets(register):
            register(Stripes())
    """, "registered an instance of Stripes as a dataset; register the class itself: register(Stripes)"),
    "model": ("""
        from arena import Model, hookimpl

        class Tiny(Model):
            name = "tiny"

            def build(self, input_shape, n_classes):
                raise NotImplementedError("never built: its registration is the mistake")

        @hookimpl
        def register_models(register):
            register(Tiny(Tiny.Params()))
    """, "registered an instance of Tiny as a model; register the class itself: register(Tiny)"),
    "defense": ("""
        from arena import Defense, hookimpl

        class Quiet(Defense):
            name = "quiet"

            def fit(self, task):
                raise NotImplementedError("never trained: its registration is the mistake")

        @hookimpl
        def register_defenses(register):
            register(Quiet(Quiet.Params()))
    """, "registered an instance of Quiet as a defense; register the class itself: register(Quiet)"),
    "attack": ("""
        from arena import Attack, hookimpl

        class Coin(Attack):
            name = "coin"
            game = "membership"

            def run(self, view):
                raise NotImplementedError("never run: its registration is the mistake")

        @hookimpl
        def register_attacks(register):
            register(Coin(Coin.Params()))
    """, "registered an instance of Coin as an attack; register the class itself: register(Coin)"),
    "metric": ("""
        from arena import Metric, hookimpl

        @hookimpl
        def register_metrics(register):
            register(Metric)
    """, "registered the class Metric as a metric; register an instance: register(Metric(...))"),
}


@pytest.mark.parametrize("kind", sorted(MISTAKES))
def test_an_instance_where_a_class_belongs_is_broken_saying_what_to_register(plugin_dist, tmp_path, capsys,
                                                                            kind: str) -> None:
    source, message = MISTAKES[kind]
    plugin_dist("arena-oops", "arena_oops_plugin", source)
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert f"  arena-oops 1.0: broken: plugin 'arena-oops:arena_oops_plugin' {message}" in out, out
    scenario = write_scenario(tmp_path / "tiny.yaml", TINY)
    assert main(["validate", str(scenario)]) == 0, "a scenario that does not use it is valid"
    assert "Traceback" not in capsys.readouterr().err


def test_arena_run_answers_a_broken_distributions_dataset_with_exit_2_and_the_message(plugin_dist, tmp_path,
                                                                                        capsys) -> None:
    source, message = MISTAKES["dataset"]
    plugin_dist("arena-oops", "arena_oops_plugin", source)
    scenario = write_scenario(tmp_path / "tiny.yaml", TINY.replace("{name: digits}", "{name: stripes}"))
    assert main(["run", str(scenario), "--out", str(tmp_path / "run"), "--serial"]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert (f"{scenario}: tracks[0].dataset.name: dataset 'stripes' is unavailable: its distribution arena-oops 1.0 "
            f"is broken: plugin 'arena-oops:arena_oops_plugin' {message}") in err, err
    assert not (tmp_path / "run" / "results.jsonl").exists()


def test_an_attack_without_a_game_is_a_registry_error(plugin_dist) -> None:
    plugin_dist("arena-nogame", "arena_nogame_plugin", """
        from arena import Attack, hookimpl

        class Coin(Attack):
            name = "coin"

        @hookimpl
        def register_attacks(register):
            register(Coin)
    """)
    assert problem("arena-nogame") == ("plugin 'arena-nogame:arena_nogame_plugin' registered attack 'coin', which "
                                       'does not name the game it plays: set its class attribute game (e.g. game = '
                                       '"membership")')


def test_an_attack_naming_an_unregistered_game_is_invalid_with_did_you_mean(plugin_dist, tmp_path, capsys) -> None:
    plugin_dist("arena-typo", "arena_typo_game", """
        from arena import Attack, hookimpl

        class Coin(Attack):
            name = "coin"
            game = "membrship"

            def run(self, view):
                raise NotImplementedError

        @hookimpl
        def register_attacks(register):
            register(Coin)
    """)
    scenario = write_scenario(tmp_path / "tiny.yaml", TINY.replace("{name: threshold-mia}", "{name: coin}"))
    assert main(["validate", str(scenario)]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert (f"{scenario}: tracks[0].attacks[0].name: attack 'coin' declares game = 'membrship': unknown game "
            "'membrship'; did you mean 'membership'?") in err, err


def test_a_game_whose_capabilities_disagree_with_its_view_is_a_registry_error(plugin_dist) -> None:
    plugin_dist("arena-caps", "arena_caps_plugin", """
        from arena import MembershipGame, hookimpl

        class Mine(MembershipGame):
            name = "mine"
            capabilities = frozenset({"query"})

        @hookimpl
        def register_games(register):
            register(Mine)
    """)
    assert re.search(r"registered game 'mine', which declares capabilities \['query'\] but "
                     r"its View MembershipView grants items by \['labels', ", problem("arena-caps"))


def test_builtin_dataset_loaders_are_registered_as_classes() -> None:
    from arena import DatasetLoader

    for entry in registries().datasets:
        assert isinstance(entry.obj, type) and issubclass(entry.obj, DatasetLoader), entry.name


def test_unknown_name_suggests_close_matches() -> None:
    with pytest.raises(UnknownNameError) as info:
        registries().defenses.get("dp-sgd")
    assert "did you mean 'dpsgd'" in str(info.value)
    assert "nonprivate" in str(info.value)


DATASET_AND_METRIC = """
import numpy as np

from arena import Dataset, DatasetLoader, Metric, hookimpl


class Stripes(DatasetLoader):
    name = "stripes"

    def load(self, params):
        X = (np.arange(600 * 4).reshape(600, 4) % 7 / 6).astype(np.float32)
        return Dataset("stripes", X, (np.arange(600) % 2).astype(np.int64), 2, "tabular", (4,))


@hookimpl
def register_datasets(register):
    register(Stripes)


@hookimpl
def register_metrics(register):
    register(Metric("stripe-score", "membership", False, "a third-party metric"))
"""


def test_third_party_dataset_and_metric_are_usable(plugin_dist, tmp_path) -> None:
    from arena.pipeline.plan import plan

    plugin_dist("arena-stripes", "arena_stripes_plugin", DATASET_AND_METRIC)
    regs = registries()
    assert regs.metrics.entry("stripe-score").distribution == "arena-stripes"
    assert regs.metrics.get("stripe-score").higher_is_better is False
    path = write_scenario(tmp_path / "s.yaml", TINY.replace("{name: digits}", "{name: stripes}"))
    matchups = plan([path]).matchups
    assert len(matchups) == 4 and matchups[0].track.dataset.name == "stripes"


LIBRARIES_A_MATCHUP_IMPORTS = ("dp_accounting", "matplotlib", "sklearn", "pandas", "scipy.stats", "scipy.optimize")
REGISTER = """
import json, sys
from arena.plugins import registries
regs = registries()
assert regs.attacks.get("lira") and regs.datasets.get("digits")
print(json.dumps([m for m in json.loads(sys.argv[1]) if m in sys.modules]))
"""


@pytest.mark.subprocess
def test_registering_the_builtin_plugins_imports_no_library_only_playing_needs() -> None:
    # Every arena process (the CLI, each Ray worker, each sandboxed attack) registers the plugins first; these
    # libraries took 3.5 s of its start-up before they were imported where a matchup first uses them.
    done = subprocess.run([sys.executable, "-c", REGISTER, json.dumps(LIBRARIES_A_MATCHUP_IMPORTS)],
                          capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_registration_refuses_an_attack_without_run_and_a_game_without_metrics() -> None:
    """The contracts' abstract parts are checked when a plugin registers: the error names the plugin, the class
    and what it lacks."""
    from arena import Attack, Game, GameSpec
    from arena import View as AnyView
    from arena.contracts.checks import game_problem
    from arena.plugins import _attack_problem
    from arena.registry import Registry, RegistryError

    class NoRun(Attack):
        name = "no-run"
        game = "membership"

    class Bare(Game):
        name = "bare"
        Spec = GameSpec
        View = AnyView

    class NoMetrics(Bare):
        name = "no-metrics"

        def release(self, procedure):
            return None

        def view(self, attack, release, procedure):
            return None

        def score(self, attack, guess):
            return None

    attacks = Registry("attack", Attack, check=_attack_problem)
    with pytest.raises(RegistryError, match=r"plugin 'p' registered attack 'no-run', which does not implement run"):
        attacks.add(NoRun, plugin="p", distribution="d", version="1")
    games = Registry("game", Game, check=game_problem)
    with pytest.raises(RegistryError, match=r"'bare', which does not implement release, view, score"):
        games.add(Bare, plugin="p", distribution="d", version="1")
    with pytest.raises(RegistryError, match=r"'no-metrics', which declares no metrics"):
        games.add(NoMetrics, plugin="p", distribution="d", version="1")
