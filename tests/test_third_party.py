"""Third-party plugins of every kind, written from the docs alone: the five example distributions of
``docs/examples/`` (an attack, a defense, a model, a dataset and a game) import only the public facade, install as
real distributions (``pip install --target``, built from their own ``pyproject.toml``) and play one tournament
together through the command line: the example attack in the example game and in the built-in membership game,
against the example defense, on the example model and dataset."""

from __future__ import annotations

import ast
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

import arena
from tests.conftest import TEST_SECRET

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples"
DISTS = {  # distribution -> its one module
    "arena-example-dataset": "arena_example_dataset",
    "arena-example-model": "arena_example_model",
    "arena-example-defense": "arena_example_defense",
    "arena-example-game": "arena_example_game",
    "arena-example-attack": "arena_example_attack",
}
VERSION = "0.1.0"

SCENARIO = """
name: third-party
seeds: [0]
tracks:
  # the example attack against the example defense, on the example model and dataset, in the built-in game
  - name: blobs-membership
    dataset: {name: example-blobs, n: 600, features: 64, classes: 3, spread: 2.0, label_noise: 0.2}
    model: {name: example-resmlp, width: 128, blocks: 1}
    training: {epochs: 100, batch_size: 25, lr: 0.1, momentum: 0.9}
    game: {name: membership, members: 60, test: 100, population: 200}
    defenses:
      - {name: nonprivate}
      - {name: example-label-smoothing, smoothing: 0.3}
    attacks:
      - {name: example-calibrated-loss}
  # the example game, played by the example attack and by the game's own baseline
  - name: blobs-attribute
    dataset: {name: example-blobs, n: 900, features: 12, classes: 3, spread: 2.0, label_noise: 0.2, binary: 1}
    model: {name: example-resmlp, width: 128, blocks: 1}
    training: {epochs: 100, batch_size: 25, lr: 0.1, momentum: 0.9}
    game: {name: example-attribute, members: 100, targets: 100, test: 200, population: 300}
    defenses:
      - {name: nonprivate}
    attacks:
      - {name: example-attribute-loss}
      - {name: example-attribute-prior}
"""


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, imported names) of every import statement in ``path``."""
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: relative import"
            found.append((node.module or "", [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
    return found


@pytest.mark.parametrize("dist", sorted(DISTS))
def test_each_example_is_one_module_importing_only_the_public_facade(dist: str) -> None:
    folder, module = EXAMPLES / dist, DISTS[dist]
    project = tomllib.loads((folder / "pyproject.toml").read_text())
    assert project["project"]["name"] == dist
    assert project["build-system"]["build-backend"] == "setuptools.build_meta"
    assert project["tool"]["setuptools"]["py-modules"] == [module]
    assert list(project["project"]["entry-points"]["arena"].values()) == [module]  # found by the arena group
    assert "privacy-arena" in project["project"]["dependencies"]
    assert sorted(p.name for p in folder.glob("*.py")) == [f"{module}.py"]

    imports = _imports(folder / f"{module}.py")
    from_arena = [names for mod, names in imports if mod == "arena"]
    assert from_arena, f"{dist} uses nothing of the arena"
    private = [mod for mod, _ in imports if mod.startswith(("arena.", "arena_plugins", "tests"))
               or (mod.startswith("_") and mod != "__future__")]
    assert private == [], f"{dist} imports private modules {private}"
    not_exported = sorted({n for names in from_arena for n in names} - set(arena.__all__))
    assert not_exported == [], f"{dist} imports names the facade does not export: {not_exported}"
    # Anything else is a library or another example distribution it declares as a dependency.
    others = {mod.split(".")[0] for mod, _ in imports} - {"arena", "__future__"} - set(sys.stdlib_module_names)
    allowed = {"numpy", "torch", "pydantic"} | {DISTS[d] for d in project["project"]["dependencies"] if d in DISTS}
    assert others <= allowed, f"{dist} imports {sorted(others - allowed)} without declaring them"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The five distributions, built from copies of their folders (setuptools writes ``build/`` beside the
    sources) and installed with pip into a fresh folder, never into the test's environment."""
    root = tmp_path_factory.mktemp("third-party")
    sources = []
    for dist in DISTS:
        sources.append(root / "src" / dist)
        shutil.copytree(EXAMPLES / dist, sources[-1],
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = root / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "--target", str(target), *map(str, sources)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for dist, module in DISTS.items():
        assert (target / f"{module}.py").is_file()
        entry_points = (target / f"{dist.replace('-', '_')}-{VERSION}.dist-info" / "entry_points.txt").read_text()
        assert "[arena]" in entry_points and module in entry_points
    return target


def _arena(site: Path, cwd: Path, *args: str, trusted: str = "arena-example-game") -> subprocess.CompletedProcess:
    """The ``arena`` command in a fresh interpreter that finds the installed examples on PYTHONPATH, trusting the
    example game (which registers its baseline attack beside the game) by name."""
    env = {**os.environ, "PYTHONPATH": str(site), "ARENA_RUN_SECRET": TEST_SECRET, "ARENA_TRUSTED": trusted}
    env.pop("ARENA_LOAD_PLUGINS", None)
    return subprocess.run([sys.executable, "-m", "arena.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600, check=False)


def _in_bounds(value: float, bounds: list[float | None]) -> bool:
    lo, hi = (-math.inf if bounds[0] is None else bounds[0]), (math.inf if bounds[1] is None else bounds[1])
    return lo <= value <= hi


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_five_example_distributions_play_one_tournament(site: Path, tmp_path: Path) -> None:
    # Untrusted, the game (with its baseline attack) is refused, saying how to trust it; the rest load.
    untrusted = _arena(site, tmp_path, "plugins", trusted="")
    assert untrusted.returncode == 0, untrusted.stderr
    assert ("  arena-example-game 0.1.0: broken: distribution 'arena-example-game' registers attacks together with a "
            "game: its attack code would run in the arena's process; trust it by name "
            "(ARENA_TRUSTED=arena-example-game or --trust arena-example-game)") in untrusted.stdout, untrusted.stdout
    assert "  arena-example-defense 0.1.0: arena process (installed in the arena environment)" in untrusted.stdout
    listing = _arena(site, tmp_path, "plugins")
    assert listing.returncode == 0, listing.stderr
    for dist, zone in {"arena-example-attack": "attack sandbox", "arena-example-game": "arena process",
                       "arena-example-defense": "arena process"}.items():
        assert f"  {dist} 0.1.0: {zone} (installed in the arena environment" in listing.stdout, listing.stdout
    for dist, names in {
        "arena-example-dataset": ["example-blobs"],
        "arena-example-model": ["example-resmlp"],
        "arena-example-defense": ["example-label-smoothing"],
        "arena-example-game": ["example-attribute", "example-attribute-prior", "attribute_advantage"],
        "arena-example-attack": ["example-calibrated-loss", "example-attribute-loss"],
    }.items():
        for name in names:
            assert any(line.split()[:1] == [name] and f"from {dist} {VERSION}" in line
                       for line in listing.stdout.splitlines()), f"{name} of {dist} not listed:\n{listing.stdout}"

    # The plan holds the example defense to the recipe fields it honours: an exact solver is refused before any
    # work, at the field that asks for it.
    newton = tmp_path / "newton.yaml"
    newton.write_text(textwrap.dedent(SCENARIO).replace("momentum: 0.9}", "momentum: 0.9, solver: newton}", 1))
    refused = _arena(site, tmp_path, "validate", str(newton))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert (f"{newton}: tracks[0].training.solver: defense 'example-label-smoothing' (tracks[0].defenses[1]) does "
            "not honour training.solver") in refused.stderr, refused.stderr

    scenario = tmp_path / "third-party.yaml"
    scenario.write_text(textwrap.dedent(SCENARIO))
    run = _arena(site, tmp_path, "run", str(scenario), "--out", str(tmp_path / "run"), "--serial", "--no-report")
    assert run.returncode == 0, run.stdout + run.stderr
    rows = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines() if line]
    by = {(r["track"], r["defense"], r["attack"]): r for r in rows}
    assert sorted(by) == sorted([
        ("blobs-membership", "nonprivate", "example-calibrated-loss"),
        ("blobs-membership", "example-label-smoothing", "example-calibrated-loss"),
        ("blobs-attribute", "nonprivate", "example-attribute-loss"),
        ("blobs-attribute", "nonprivate", "example-attribute-prior"),
    ])
    for row in rows:
        assert row["status"] == "ok", (row["error"], row["traceback"])
        for name, value in row["metrics"].items():  # every declared metric within its declared range
            if name in row["metric_info"] and value is not None:
                assert _in_bounds(value, row["metric_info"][name]["bounds"]), (name, value)
        assert 1 / 3 < row["utility"] <= 1.0  # each release beats the 3-class coin on held-out records
        assert row["claim"] is None  # neither defense claims (ε, δ)
    # The rows name the third-party code that made them: distribution and version, then the plugin and its own.
    for (track, defense, attack), kind, dist, name in [
        (("blobs-membership", "nonprivate", "example-calibrated-loss"), "attack", "arena-example-attack",
         "example-calibrated-loss"),
        (("blobs-membership", "example-label-smoothing", "example-calibrated-loss"), "defense",
         "arena-example-defense", "example-label-smoothing"),
        (("blobs-attribute", "nonprivate", "example-attribute-prior"), "attack", "arena-example-game",
         "example-attribute-prior"),
        (("blobs-attribute", "nonprivate", "example-attribute-prior"), "game", "arena-example-game",
         "example-attribute"),
        (("blobs-attribute", "nonprivate", "example-attribute-loss"), "model", "arena-example-model",
         "example-resmlp"),
        (("blobs-attribute", "nonprivate", "example-attribute-loss"), "dataset", "arena-example-dataset",
         "example-blobs"),
    ]:
        recorded = by[track, defense, attack]["versions"][kind]
        assert recorded.startswith(f"{dist} {VERSION}") and recorded.endswith(f"/ {name} v1"), recorded

    # Membership: 60 members memorised by a 128-wide MLP on 64-dimensional noisy blobs; the calibrated loss
    # tells them from 60 non-members far above chance (AUC 0.5).
    for defense in ("nonprivate", "example-label-smoothing"):
        row = by["blobs-membership", defense, "example-calibrated-loss"]
        assert row["metrics"]["n_members"] == row["metrics"]["n_nonmembers"] == 60
        assert row["metrics"]["auc"] > 0.6, (defense, row["metrics"])  # 0.74 and 0.80 with the suite's secret
        assert row["metrics"]["tpr@1%fpr"] is None  # 60 non-members cannot resolve 1 % FPR, and the row says so
    # The example game: its own metrics, declared and ranked as it says, from its own guess type.
    loss = by["blobs-attribute", "nonprivate", "example-attribute-loss"]
    prior = by["blobs-attribute", "nonprivate", "example-attribute-prior"]
    for row in (loss, prior):
        assert row["game"] == "example-attribute"
        assert row["primary_metric"] == row["rank_metric"] == "attribute_advantage"
        assert set(row["metric_info"]) == {"attribute_accuracy", "attribute_accuracy_nonmembers",
                                           "attribute_advantage"}
        m = row["metrics"]
        assert m["n_members"] == m["n_nonmembers"] == 100 and m["n_values"] == 2
        assert math.isclose(m["attribute_advantage"], m["attribute_accuracy"] - m["attribute_accuracy_nonmembers"])
    # Filling in each value and keeping the one the model fits best finds members' attribute above chance (1/2),
    # and above what their labels alone tell (the baseline never queries the model): 0.69 against 0.59.
    assert loss["metrics"]["attribute_accuracy"] > max(0.55, prior["metrics"]["attribute_accuracy"]), \
        (loss["metrics"], prior["metrics"])
    assert "(example-attribute; ranked by attribute_advantage" in run.stdout, run.stdout
