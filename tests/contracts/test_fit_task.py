"""Plain-PyTorch defenses get the recipe, or are told: the FitTask's helpers (``optimizer``, ``penalty``,
``finish``, ``device``) train exactly as the engine does (learning rate, momentum, ``model.l2`` on weights only,
the moving average of the iterates), and a recipe field a defense does not honour (``Defense.honours``) is a
validation error naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from arena.cli import main
from arena.contracts.defense import RECIPE_FIELDS, Defense, FitTask, RecipeSGD
from arena.engine.recipe import Recipe
from arena.engine.trainer import train
from arena.pipeline.plan import plan
from arena.pipeline.scenario import ScenarioError
from arena_plugins.relaxloss import RelaxLoss, RelaxLossParams
from tests.conftest import architecture, write_scenario


def _task(recipe: Recipe, l2: float = 0.0, name: str = "mlp", **model: object) -> FitTask:
    g = torch.Generator().manual_seed(0)
    K, n, d = 3, 40, 6
    X = torch.randn(K, n, d, generator=g, dtype=torch.float64)
    y = (X[..., 0] + 0.3 * torch.randn(K, n, generator=g, dtype=torch.float64) > 0).long()
    arch = architecture(name, d, 2, l2=l2, **model)
    return FitTask(arch, recipe, X, y, torch.tensor([1, 2, 3]), torch.tensor([10, 20, 30]))


def _plain(task: FitTask) -> dict[str, torch.Tensor]:
    """A plain-PyTorch defense on the helpers: mean cross-entropy per model, summed, stepped by the recipe."""
    ensemble = task.ensemble()
    opt = task.optimizer(ensemble)
    for X, y, _ in task.minibatches():
        opt.zero_grad()
        ce = F.cross_entropy(ensemble(X).flatten(0, 1), y.flatten(), reduction="none").view(y.shape)
        ce.mean(1).sum().backward()
        opt.step()
    return task.finish(ensemble, opt).state


def _first_weight(state: dict[str, torch.Tensor]) -> torch.Tensor:
    return next(v for k, v in state.items() if k.endswith("weight"))


@pytest.mark.slow
@pytest.mark.parametrize("recipe", [
    Recipe(epochs=3, lr=0.2, momentum=0.9, batch_size=8),
    Recipe(epochs=3, lr=0.2, momentum=0.0, batch_size=None),
    Recipe(epochs=4, lr=0.3, momentum=0.5, batch_size=16, ema=0.8),
], ids=["momentum", "full-batch", "ema"])
@pytest.mark.parametrize("l2", [0.0, 0.05])
def test_the_helpers_train_exactly_as_the_engine(recipe: Recipe, l2: float) -> None:
    task = _task(recipe, l2, hidden=[5])
    engine = train(task.arch, task.X, task.y, recipe, task.init_seeds, task.train_seeds, engine="functional")
    plain = _plain(task)
    assert plain.keys() == engine.keys()
    for name in engine:
        torch.testing.assert_close(plain[name], engine[name], rtol=1e-9, atol=1e-11)


@pytest.mark.slow
def test_each_recipe_field_changes_what_the_helpers_release() -> None:
    base = Recipe(epochs=3, lr=0.2, momentum=0.0, batch_size=8)
    reference = _plain(_task(base, hidden=[5]))
    for changed, l2 in [(Recipe(epochs=3, lr=0.2, momentum=0.9, batch_size=8), 0.0),
                        (Recipe(epochs=3, lr=0.2, momentum=0.0, batch_size=8, ema=0.9), 0.0),
                        (Recipe(epochs=3, lr=0.05, momentum=0.0, batch_size=8), 0.0), (base, 1.0)]:
        other = _plain(_task(changed, l2, hidden=[5]))
        assert not torch.allclose(_first_weight(other), _first_weight(reference)), (changed, l2)


def test_weight_decay_and_the_penalty_cover_weights_only() -> None:
    task = _task(Recipe(epochs=1, lr=0.1), l2=0.5, hidden=[5])
    ensemble = task.ensemble()
    opt = task.optimizer(ensemble)
    decay = {id(p): g["weight_decay"] for g in opt.param_groups for p in g["params"]}
    for name, p in ensemble.state().items():
        assert decay[id(p)] == (0.5 if name.endswith("weight") else 0.0), name
    task.penalty(ensemble).backward()
    for name, p in ensemble.state().items():
        if name.endswith("weight"):
            torch.testing.assert_close(p.grad, 0.5 * p.detach())
        else:
            assert p.grad is None or not p.grad.any(), name
    no_l2 = _task(Recipe(epochs=1, lr=0.1), hidden=[5])
    assert no_l2.penalty(no_l2.ensemble()).item() == 0.0


def test_the_optimizer_takes_stacked_tensors_too() -> None:
    task = _task(Recipe(epochs=1, lr=0.1), l2=0.5, hidden=[5])
    ensemble = task.ensemble()
    opt = task.optimizer(list(ensemble.parameters()))
    decay = {id(p): g["weight_decay"] for g in opt.param_groups for p in g["params"]}
    assert sorted(decay.values()) == [0.0, 0.0, 0.5, 0.5]
    with pytest.raises(TypeError, match="task.ensemble"):
        task.optimizer([])


def test_finish_needs_the_optimizer_when_the_recipe_keeps_an_average() -> None:
    task = _task(Recipe(epochs=1, lr=0.1, ema=0.9), hidden=[5])
    ensemble = task.ensemble()
    with pytest.raises(ValueError, match="training.ema"):
        task.finish(ensemble)
    with pytest.raises(ValueError, match="task.optimizer"):
        task.finish(ensemble, torch.optim.SGD(ensemble.parameters(), lr=0.1))
    assert isinstance(task.optimizer(ensemble), RecipeSGD)
    assert task.device == task.X.device == next(ensemble.parameters()).device


def test_relaxloss_follows_the_moving_average_and_declares_what_it_honours() -> None:
    assert RelaxLoss.honours == RECIPE_FIELDS - {"solver"} and Defense.honours == RECIPE_FIELDS
    defense = RelaxLoss(RelaxLossParams(alpha=0.3))
    plain = defense.fit(_task(Recipe(epochs=3, lr=0.2, momentum=0.9, batch_size=8), hidden=[5])).state
    averaged = defense.fit(_task(Recipe(epochs=3, lr=0.2, momentum=0.9, batch_size=8, ema=0.9), hidden=[5])).state
    assert not torch.allclose(_first_weight(plain), _first_weight(averaged))


PARTIAL = '''
import torch.nn.functional as F

from arena import Defense, Fit, FitTask, hookimpl


class Partial(Defense):
    """Plain PyTorch that follows the recipe's batches and learning rate only."""

    name = "partial"
    honours = frozenset({"epochs", "lr", "batch_size"})

    def fit(self, task: FitTask) -> Fit:
        raise NotImplementedError


@hookimpl
def register_defenses(register):
    register(Partial)
'''

SCENARIO = """
name: honours
seeds: [0]
tracks:
  - name: t
    dataset: {name: synthetic, n: 600, features: 8, classes: 2}
    model: {name: mlp, hidden: [8]MODEL}
    training: {epochs: 2, batch_size: 32, lr: 0.1TRAINING}
    game: {name: membership, members: 100, test: 100}
    defenses:
      - {name: nonprivate}
      - {name: partialENTRY}
    attacks:
      - {name: threshold-mia}
"""


def _scenario(tmp_path: Path, model: str = "", training: str = "", entry: str = "") -> Path:
    return write_scenario(tmp_path / "s.yaml", SCENARIO.replace("MODEL", model).replace("TRAINING", training)
                          .replace("ENTRY", entry))


def test_a_recipe_field_the_defense_does_not_honour_is_refused_at_its_field(plugin_dist, tmp_path: Path,
                                                                             capsys) -> None:
    plugin_dist("arena-partial", "arena_partial", PARTIAL)
    assert len(plan([_scenario(tmp_path)]).matchups) == 2  # the fields it honours, the others neutral
    assert len(plan([_scenario(tmp_path, training=", momentum: 0.0, ema: 0.0")]).matchups) == 2  # neutral values

    path = _scenario(tmp_path, entry=", training: {ema: 0.99}")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert (f"{path}: tracks[0].defenses[1].training.ema: defense 'partial' (tracks[0].defenses[1]) does not "
            "honour training.ema = 0.99") in err, err
    assert "tracks[0].defenses[0]" not in err  # nonprivate (the engine) honours every field

    cases = {
        ", momentum: 0.9": "tracks[0].training.momentum: defense 'partial' (tracks[0].defenses[1]) does not honour "
                           "training.momentum = 0.9",
        ", augment: {flip: true}": "tracks[0].training.augment: defense 'partial'",
        ", solver: newton": "tracks[0].training.solver: defense 'partial'",
    }
    for training, message in cases.items():
        with pytest.raises(ScenarioError) as caught:
            plan([_scenario(tmp_path, training=training)])
        assert any(message in p for p in caught.value.problems), (training, caught.value.problems)
    with pytest.raises(ScenarioError) as caught:
        plan([_scenario(tmp_path, model=", l2: 1.0")])
    assert any("tracks[0].model.l2: defense 'partial' (tracks[0].defenses[1]) does not honour model.l2 = 1.0" in p
               for p in caught.value.problems), caught.value.problems


def test_relaxloss_refuses_the_newton_solver_when_validated(tmp_path: Path) -> None:
    path = write_scenario(tmp_path / "s.yaml", SCENARIO.replace("MODEL", "").replace("ENTRY", "")
                          .replace("name: partial", "name: relaxloss, alpha: 0.5")
                          .replace("TRAINING", ", momentum: 0.9, ema: 0.5"))
    assert len(plan([path]).matchups) == 2  # momentum and ema: it honours them
    newton = write_scenario(tmp_path / "n.yaml", SCENARIO.replace("hidden: [8]MODEL", "hidden: [], l2: 0.01")
                            .replace("ENTRY", "").replace("name: partial", "name: relaxloss, alpha: 0.5")
                            .replace("TRAINING", ", solver: newton"))
    with pytest.raises(ScenarioError) as caught:
        plan([newton])
    assert any("tracks[0].training.solver: defense 'relaxloss' (tracks[0].defenses[1]) does not honour "
               "training.solver = 'newton'" in p for p in caught.value.problems), caught.value.problems


def test_honours_must_name_recipe_fields(plugin_dist, capsys) -> None:
    plugin_dist("arena-typo", "arena_typo", PARTIAL.replace('{"epochs", "lr", "batch_size"}', '{"epochs", "emma"}'))
    assert main(["plugins"]) == 0  # a broken distribution is listed as broken, the others still load
    out = capsys.readouterr().out
    assert "arena-typo" in out and "broken" in out, out
    assert "registered defense 'partial', which declares honours with unknown recipe fields 'emma'" in out, out
