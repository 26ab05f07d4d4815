"""Bring your own training (issue 39, 3): a defense made from a user's plain-PyTorch ``fit(model, X, y, seed)``
trains the target and every shadow model, on the loop engine, from the arena's seeded initialisation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import arena
from arena.engine.ensemble import init_state
from arena.engine.loop import train_user
from arena.pipeline.user_fit import load_fit, user_defense
from tests.conftest import architecture, write_scenario

USER_PLUGIN = '''
import json
import os

import torch

import arena


def fit(model, X, y, seed, recipe):
    """A user's own loop: Adam, a cosine schedule, their own shuffling from the arena's seed."""
    with open(os.environ["USER_FIT_CALLS"], "a") as f:
        f.write(json.dumps({"seed": seed, "n": len(y), "training": model.training,
                            "shape": list(X.shape)}) + "\\n")
    opt = torch.optim.Adam(model.parameters(), lr=recipe.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=recipe.epochs)
    g = torch.Generator().manual_seed(seed)
    for _ in range(recipe.epochs):
        for idx in torch.randperm(len(y), generator=g).split(16):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(X[idx]), y[idx]).backward()
            opt.step()
        sched.step()
    return model


@arena.hookimpl
def register_defenses(register):
    register(arena.user_defense(fit, name="user-fit-test"))
'''

SCENARIO = """
name: byo-training
seeds: [0]
tracks:
  - name: digits-byo
    dataset: {name: digits}
    model: {name: mlp, hidden: [8], activation: relu}
    training: {epochs: 3, lr: 0.01}
    game: {name: membership, members: 40, test: 80}
    defenses:
      - {name: user-fit-test}
    attacks:
      - {name: lira, shadows: 4, fixed_variance: true}
"""


def test_a_user_function_defense_plays_a_lira_tournament(plugin_dist, tmp_path: Path, monkeypatch) -> None:
    """The user's function trains the target and each of LiRA's 4 shadows (5 calls, each with its own seed, a
    module in train mode and records shaped as the model takes them); the row says the loop engine ran it."""
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("USER_FIT_CALLS", str(calls))
    plugin_dist("arena-user-fit", "arena_user_fit", USER_PLUGIN)
    results = arena.run(write_scenario(tmp_path / "s.yaml", SCENARIO), tmp_path / "run", serial=True, report=False)
    [row] = results.rows
    assert row["status"] == "ok", row.get("error")
    assert 0.0 <= row["metrics"]["auc"] <= 1.0
    assert any("loop" in n and "arena_user_fit.fit" in n for n in row["notes"]), row["notes"]
    assert row["versions"]["defense"].endswith(f"user-fit-test v1+fit.{row['versions']['defense'][-12:]}")
    made = [json.loads(line) for line in calls.read_text().splitlines()]
    assert len(made) == 1 + 4  # the target and LiRA's four shadows, each trained by the user's function
    assert len({c["seed"] for c in made}) == 5
    assert all(c["training"] and c["shape"] == [c["n"], 1, 8, 8] for c in made), made  # digits: (1, 8, 8)
    assert {c["n"] for c in made} == {40}  # the target's members; each shadow a half of the 80-point challenge


def test_train_user_starts_from_the_arenas_initialisation_and_keeps_what_fit_did() -> None:
    arch = architecture("mlp", 4, 3, hidden=[5])
    seeds = torch.tensor([3, 4])
    state = init_state(arch, seeds)
    X, y = torch.randn(2, 10, 4), torch.randint(0, 3, (2, 10))
    seen: list[dict[str, torch.Tensor]] = []

    def fit(model: torch.nn.Module, X: torch.Tensor, y: torch.Tensor, seed: int) -> torch.nn.Module:
        seen.append({n: t.detach().clone() for n, t in model.state_dict().items()})
        with torch.no_grad():
            for p in model.parameters():
                p.add_(seed)
        return model

    out = train_user(arch, X, y, state, torch.tensor([10, 20]), fit)
    for k, shift in enumerate((10, 20)):
        for name in state:
            assert torch.equal(seen[k][name], state[name][k])  # the arena's seeded initialisation of model k
            assert torch.allclose(out[name][k], state[name][k] + shift)


def test_a_fit_that_returns_something_else_is_refused() -> None:
    arch = architecture("mlp", 4, 3, hidden=[5])
    state = init_state(arch, torch.tensor([1]))
    with pytest.raises(ValueError, match="not the torch.nn.Module"):
        train_user(arch, torch.randn(1, 6, 4), torch.zeros(1, 6, dtype=torch.long), state, torch.tensor([1]),
                   lambda m, X, y, seed: 3)
    with pytest.raises(ValueError, match="without the model's tensors"):
        train_user(arch, torch.randn(1, 6, 4), torch.zeros(1, 6, dtype=torch.long), state, torch.tensor([1]),
                   lambda m, X, y, seed: torch.nn.Linear(2, 2))


def test_a_script_path_names_its_function(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("def fit(model, X, y, seed):\n    return model\n")
    cls = user_defense(f"{script}:fit", name="from-script")
    assert cls.name == "from-script" and cls.fit_function is load_fit(f"{script}:fit")
    assert cls.version.startswith("1+fit.") and cls.honours == frozenset({"epochs", "lr"})
    for bad in (f"{script}", f"{tmp_path}/none.py:fit", f"{script}:nothing"):
        with pytest.raises(ValueError):
            user_defense(bad, name="x")
    edited = tmp_path / "train2.py"
    edited.write_text("def fit(model, X, y, seed):\n    model.eval()\n    return model\n")
    assert user_defense(f"{edited}:fit", name="x").version != cls.version  # the source is in the version


def test_a_configuration_pickles_by_how_its_class_was_made(tmp_path: Path) -> None:
    """The class is made at run time, so its configurations travel to workers as (fit, name, version, honours,
    params) and come back as configurations of the same class."""
    import pickle

    script = tmp_path / "train_pickle.py"
    script.write_text("def fit(model, X, y, seed):\n    return model\n")
    cls = user_defense(f"{script}:fit", name="pickled", honours=("epochs", "lr", "batch_size"))
    back = pickle.loads(pickle.dumps(cls(cls.Params())))
    assert type(back) is cls and back.honours == {"epochs", "lr", "batch_size"} and back.version == cls.version


def test_a_relative_script_path_is_kept_absolute(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "rel_train.py").write_text("def fit(model, X, y, seed):\n    return model\n")
    monkeypatch.chdir(tmp_path)
    cls = user_defense("rel_train.py:fit", name="relative", honours=iter(["lr", "epochs"]))
    assert cls.honours == {"epochs", "lr"}
    monkeypatch.chdir("/")
    import pickle

    assert type(pickle.loads(pickle.dumps(cls(cls.Params())))) is cls  # found again from another directory
