"""Scenario validation: every malformed file is rejected with exit status 2, its file and field path, no traceback,
and nothing written to the run directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from arena.cli import main
from tests.conftest import TINY, write_scenario

# (what is wrong, replacement applied to the tiny scenario, text expected in the message)
MALFORMED = [
    ("unknown top-level key", ("seeds: [0, 1]", "seeds: [0, 1]\nsedds: [3]"), "sedds"),
    ("seed of wrong type", ("seeds: [0, 1]", "seeds: [zero]"), "seeds[0]"),
    ("negative seed", ("seeds: [0, 1]", "seeds: [-1]"), "seeds[0]"),
    ("no seeds", ("seeds: [0, 1]", "seeds: []"), "seeds"),
    ("repeated seeds", ("seeds: [0, 1]", "seeds: [1, 1]"), "seeds"),
    ("unknown track key", ("    game: {", "    colour: blue\n    game: {"), "tracks[0].colour"),
    ("unknown device", ("    game: {", "    device: tpu\n    game: {"), "tracks[0].device"),
    ("unknown engine", ("    game: {", "    engine: turbo\n    game: {"), "tracks[0].engine"),
    ("zero members", ("members: 50", "members: 0"), "tracks[0].game.members"),
    ("negative epochs", ("epochs: 5", "epochs: -5"), "tracks[0].training.epochs"),
    ("zero batch", ("batch_size: 32", "batch_size: 0"), "tracks[0].training.batch_size"),
    ("momentum of one", ("momentum: 0.9", "momentum: 1.0"), "tracks[0].training.momentum"),
    ("string lr", ("lr: 0.1", "lr: fast"), "tracks[0].training.lr"),
    ("unknown model", ("name: mlp", "name: transformer"), "tracks[0].model"),
    ("unknown activation", ("activation: relu", "activation: swish"), "tracks[0].model.activation"),
    ("unknown game", ("name: membership", "name: attribute"), "tracks[0].game"),
    ("epsilon zero", ("epsilons: [4]", "epsilons: [0]"), "tracks[0].defenses[1].epsilons[0]"),
    ("epsilon negative", ("epsilons: [4]", "epsilons: [-1]"), "tracks[0].defenses[1].epsilons[0]"),
    ("delta zero", ("delta: 1.0e-3", "delta: 0"), "tracks[0].defenses[1].delta"),
    ("delta above 1/N", ("delta: 1.0e-3", "delta: 0.05"), "tracks[0].defenses[1].delta"),
    ("unknown defense", ("{name: nonprivate}", "{name: nonprivat}"), "did you mean 'nonprivate'"),
    ("unknown attack", ("{name: threshold-mia}", "{name: treshold-mia}"), "tracks[0].attacks[0].name"),
    ("bad attack parameter", ("{name: threshold-mia}", "{name: threshold-mia, signal: vibes}"),
     "tracks[0].attacks[0].signal"),
    ("unknown attack parameter", ("{name: threshold-mia}", "{name: threshold-mia, fpr: 0.1, colour: red}"),
     "tracks[0].attacks[0].colour"),
    ("unknown dataset", ("{name: digits}", "{name: digitz}"), "tracks[0].dataset.name"),
    ("dataset too small", ("members: 50", "members: 900"), "tracks[0].game: needs"),
    ("missing local dataset", ("{name: digits}", "{name: mnist, path: /nonexistent/mnist}"),
     "tracks[0].dataset.path"),
    ("newton on an MLP", ("momentum: 0.9}", "momentum: 0.9, solver: newton}"), "tracks[0].training.solver"),
    ("track without defenses", ("    defenses:\n      - {name: nonprivate}\n      - {name: dpsgd, epsilons: [4], "
                                "delta: 1.0e-3}", "    defenses: []"), "tracks[0].defenses"),
    ("bad track name", ("name: digits-small", "name: 'digits small!'"), "tracks[0].name"),
    ("invalid YAML", ("seeds: [0, 1]", "seeds: [0, 1"), "invalid YAML"),
    ("not a mapping", (None, "- just\n- a list\n"), "expected a mapping"),
    ("python object tag", ("seeds: [0, 1]", "seeds: !!python/object/apply:os.system ['touch /tmp/pwned']"),
     "not allowed"),
]


def _make(tmp_path: Path, change: tuple[str | None, str]) -> Path:
    old, new = change
    text = new if old is None else TINY.replace(old, new, 1)
    assert old is None or text != TINY, f"replacement {old!r} did not apply"
    return write_scenario(tmp_path / "bad.yaml", text)


@pytest.mark.parametrize("what,change,expected", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_scenario_is_rejected_before_any_work(tmp_path, capsys, what, change, expected) -> None:
    path = _make(tmp_path, change)
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--serial"]) == 2
    err = capsys.readouterr().err
    assert str(path) in err, err
    assert expected in err, err
    assert "Traceback" not in err
    assert not out.exists(), "nothing may be written for bad input"
    assert main(["validate", str(path)]) == 2


def test_at_least_twenty_malformed_cases() -> None:
    assert len(MALFORMED) >= 20


def test_yaml_code_execution_is_refused(tmp_path, capsys) -> None:
    marker = tmp_path / "pwned"
    path = write_scenario(tmp_path / "evil.yaml", f"!!python/object/apply:os.system ['touch {marker}']\n")
    assert main(["validate", str(path)]) == 2
    assert not marker.exists()
    assert "python/object/apply:os.system" in capsys.readouterr().err


def test_all_problems_of_all_files_are_reported_together(tmp_path, capsys) -> None:
    a = write_scenario(tmp_path / "a.yaml", TINY.replace("members: 50", "members: 0"))
    b = write_scenario(tmp_path / "b.yaml", TINY.replace("name: tiny", "name: tiny-b").replace(
        "{name: threshold-mia}", "{name: lira-ish}").replace("epsilons: [4]", "epsilons: [-4]"))
    assert main(["validate", str(a), str(b)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert any(line.startswith(f"{a}: tracks[0].game.members") for line in err)
    assert any(line.startswith(f"{b}: tracks[0].attacks[0].name") for line in err)
    assert any(line.startswith(f"{b}: tracks[0].defenses[1].epsilons[0]") for line in err)


def test_valid_scenario_counts_its_matchups(tiny_scenario, capsys) -> None:
    assert main(["validate", str(tiny_scenario)]) == 0
    # 2 defense configurations × 1 attack × 2 seeds
    assert "4 matchups" in capsys.readouterr().out


def test_dpsgd_epsilon_list_expands_into_configurations(tmp_path) -> None:
    from arena.pipeline.plan import plan

    path = write_scenario(tmp_path / "s.yaml", TINY.replace("epsilons: [4]", "epsilons: [0.5, 2, 8]"))
    labels = sorted({m.defense.label for m in plan([path]).matchups})
    assert labels == ["dpsgd(eps=0.5)", "dpsgd(eps=2)", "dpsgd(eps=8)", "nonprivate"]


PRIOR_HUNGRY = """
from arena.contracts.attack import Attack
from arena.hookspecs import hookimpl


class NeedsPrior(Attack):
    name = "needs-prior"
    game = "membership"
    threat_model = frozenset({"query", "prior"})

    def run(self, view):
        raise AssertionError("never played")


@hookimpl
def register_attacks(register):
    register(NeedsPrior)
"""


def test_attack_whose_threat_model_the_game_cannot_serve(plugin_dist, tmp_path, capsys) -> None:
    plugin_dist("arena-prior", "arena_prior_plugin", PRIOR_HUNGRY)
    path = write_scenario(tmp_path / "s.yaml", TINY.replace("{name: threshold-mia}", "{name: needs-prior}"))
    assert main(["run", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "tracks[0].attacks[0].name" in err and "needs prior" in err
    assert not (tmp_path / "run").exists()
