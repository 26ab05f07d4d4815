"""Plugin loading through real entry points: third-party distributions, duplicates, misspelt hooks, restriction."""

from __future__ import annotations

import pytest

from arena.plugins import PluginLoadError, build_registries, registries
from arena.registry import RegistryError, UnknownNameError

THIRD_PARTY = """
from arena.contracts.attack import Attack
from arena.games.membership.guess import MembershipGuess
from arena.hookspecs import hookimpl


class Coin(Attack):
    name = "coin-flip"
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
    with pytest.raises(RegistryError) as info:
        build_registries()
    message = str(info.value)
    assert "threshold-mia" in message
    assert "privacy-arena:membership_attacks" in message and "arena-dup:arena_dup_plugin" in message


def test_misspelt_hook_is_a_load_error(plugin_dist) -> None:
    plugin_dist("arena-typo", "arena_typo_plugin", """
        from arena.hookspecs import hookimpl

        @hookimpl
        def register_attack(register):
            pass
    """)
    with pytest.raises(PluginLoadError, match="register_attack"):
        build_registries()


def test_wrong_hook_argument_is_a_load_error(plugin_dist) -> None:
    plugin_dist("arena-args", "arena_args_plugin", """
        from arena.hookspecs import hookimpl

        @hookimpl
        def register_attacks(register, extra):
            pass
    """)
    with pytest.raises(PluginLoadError, match="extra"):
        build_registries()


def test_registering_a_non_attack_is_rejected(plugin_dist) -> None:
    plugin_dist("arena-bad", "arena_bad_plugin", """
        from arena.hookspecs import hookimpl

        class NotAnAttack:
            name = "nope"

        @hookimpl
        def register_attacks(register):
            register(NotAnAttack)
    """)
    with pytest.raises(RegistryError, match="not a Attack"):
        build_registries()


def test_unknown_name_suggests_close_matches() -> None:
    with pytest.raises(UnknownNameError) as info:
        registries().defenses.get("dp-sgd")
    assert "did you mean 'dpsgd'" in str(info.value)
    assert "nonprivate" in str(info.value)


DATASET_AND_METRIC = """
import numpy as np

from arena.contracts.dataset import Dataset, DatasetLoader
from arena.hookspecs import hookimpl
from arena.contracts.metric import Metric


class Stripes(DatasetLoader):
    name = "stripes"

    def load(self, params):
        X = (np.arange(600 * 4).reshape(600, 4) % 7 / 6).astype(np.float32)
        return Dataset("stripes", X, (np.arange(600) % 2).astype(np.int64), 2, "tabular", (4,))


@hookimpl
def register_datasets(register):
    register(Stripes())


@hookimpl
def register_metrics(register):
    register(Metric("stripe-score", "membership", False, "a third-party metric"))
"""


def test_third_party_dataset_and_metric_are_usable(plugin_dist, tmp_path) -> None:
    from arena.run.plan import plan
    from tests.conftest import TINY, write_scenario

    plugin_dist("arena-stripes", "arena_stripes_plugin", DATASET_AND_METRIC)
    regs = registries()
    assert regs.metrics.entry("stripe-score").distribution == "arena-stripes"
    assert regs.metrics.get("stripe-score").higher_is_better is False
    path = write_scenario(tmp_path / "s.yaml", TINY.replace("{name: digits}", "{name: stripes}"))
    matchups = plan([path]).matchups
    assert len(matchups) == 4 and matchups[0].track.dataset.name == "stripes"
