"""Reconstruction attacks: the GLM closed form is exact and skips non-GLMs; reconn learns; a tiny tournament."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from arena import tournament
from arena.engine.newton import fit_logreg
from arena.execute import play_matchup
from arena.plan import plan
from arena.report.grids import GRID_FILE
from arena.scenario import PluginRef, ReconstructionGameSpec, Track, TrainingSpec
from arena.store import RunStore
from arena_plugins.reconstruction import GLMReconstruction, glm_closed_form
from tests.conftest import write_scenario


@pytest.mark.parametrize("n_classes, l2", [(2, 0.0), (2, 1e-2), (4, 0.0), (4, 1e-2)])
def test_closed_form_recovers_hand_made_targets_exactly(n_classes: int, l2: float) -> None:
    g = torch.Generator().manual_seed(n_classes)
    fixed_X = torch.rand(40, 3, generator=g, dtype=torch.float64)
    fixed_y = torch.randint(0, n_classes, (40,), generator=g)
    targets = torch.tensor([[0.25, 0.5, 0.75], [1.0, 0.0, 0.5], [0.1, 0.9, 0.3]], dtype=torch.float64)
    labels = torch.tensor([1, 0, n_classes - 1])
    X = torch.cat([fixed_X.expand(3, -1, -1), targets[:, None]], 1)
    y = torch.cat([fixed_y.expand(3, -1), labels[:, None]], 1)
    params = fit_logreg(X, y, n_classes, l2)
    records, found = glm_closed_form(params, fixed_X, fixed_y, l2)
    torch.testing.assert_close(records, targets, rtol=0, atol=1e-7)
    assert found.tolist() == labels.tolist()


def test_closed_form_uses_the_papers_scaling_by_n() -> None:
    """With L2 the D⁻ sum must be scaled by n = |D⁻| + 1; using the wrong l2 leaves a visible error."""
    g = torch.Generator().manual_seed(0)
    fixed_X, fixed_y = torch.rand(40, 3, generator=g, dtype=torch.float64), torch.randint(0, 3, (40,), generator=g)
    z = torch.tensor([[0.2, 0.4, 0.6]], dtype=torch.float64)
    params = fit_logreg(torch.cat([fixed_X, z])[None], torch.cat([fixed_y, torch.tensor([2])])[None], 3, 0.1)
    right, _ = glm_closed_form(params, fixed_X, fixed_y, 0.1)
    wrong, _ = glm_closed_form(params, fixed_X, fixed_y, 0.1 * 40 / 41)
    assert (right - z).abs().max() < 1e-8 < (wrong - z).abs().max()


def _track(model) -> Track:  # noqa: ANN001
    return Track(
        name="t",
        dataset=PluginRef(name="digits"),
        model=model,
        training=TrainingSpec(epochs=1, lr=0.1),
        game=ReconstructionGameSpec(name="reconstruction"),
        defenses=[PluginRef(name="nonprivate")],
        attacks=[PluginRef(name="glm-reconstruction")],
    )


def test_closed_form_applies_to_logistic_regression_only() -> None:
    attack = GLMReconstruction(GLMReconstruction.Params())
    assert attack.skip_reason(_track(PluginRef(name="logreg", l2=0.1))) is None
    reason = attack.skip_reason(_track(PluginRef(name="mlp", hidden=[8])))
    assert reason is not None and "logistic regression" in reason and "'mlp'" in reason


TINY = """
name: tiny-reconstruction
seeds: [0]
tracks:
  - name: logreg
    dataset: {name: synthetic, n: 300, features: 6, classes: 3}
    model: {name: logreg, l2: 0.01}
    training: {epochs: 1, lr: 0.1}
    game: {name: reconstruction, fixed: 40, targets: 12, shadow_targets: 100, test: 50}
    defenses:
      - {name: nonprivate}
      - {name: output-perturbation, epsilons: [1]}
    attacks:
      - {name: glm-reconstruction}
  - name: mlp
    dataset: {name: synthetic, n: 400, features: 6, classes: 3}
    model: {name: mlp, hidden: [4], activation: tanh}
    training: {epochs: 20, lr: 0.5, momentum: 0.9}
    game: {name: reconstruction, fixed: 30, targets: 20, shadow_targets: 300, test: 50}
    defenses:
      - {name: nonprivate}
    attacks:
      - {name: reconn, hidden: [64], epochs: 60, batch_size: 32, lr: 3.0e-3}
      - {name: glm-reconstruction}
"""


def test_tiny_reconstruction_tournament(tmp_path: Path) -> None:
    p = plan([write_scenario(tmp_path / "tiny.yaml", TINY)])
    store = RunStore(tmp_path / "run")
    rows = {(r["track"], r["defense_label"], r["attack"]): r for r in tournament.run(p, store, serial=True)}
    assert len(rows) == 4
    exact = rows[("logreg", "nonprivate", "glm-reconstruction")]
    assert exact["status"] == "ok", exact["error"]
    m = exact["metrics"]
    assert m["success_rate"] == 1.0 and m["label_accuracy"] == 1.0 and m["mse_median"] < 1e-12 and m["n_targets"] == 12
    noisy = rows[("logreg", "output-perturbation(eps=1)", "glm-reconstruction")]
    assert noisy["status"] == "ok" and noisy["claim"]["epsilon"] == 1.0
    assert noisy["metrics"]["mse_mean"] > noisy["metrics"]["oracle_mse_mean"]
    skipped = rows[("mlp", "nonprivate", "glm-reconstruction")]
    assert skipped["status"] == "skipped" and "logistic regression" in skipped["error"]
    learned = rows[("mlp", "nonprivate", "reconn")]
    assert learned["status"] == "ok", learned["error"]
    assert learned["metrics"]["label_accuracy"] is None
    # far better than the best constant guess, the targets' own mean (whose mean MSE is the targets' variance)
    arrays = store.load_arrays(learned["key"])
    targets = arrays["targets"].numpy()
    assert learned["metrics"]["mse_mean"] < 0.5 * ((targets - targets.mean(0)) ** 2).mean()
    for row in rows.values():
        if row["status"] == "ok":
            assert (store.artifact_dir(row["key"]) / GRID_FILE).is_file()
    (matchup,) = [m for m in p.matchups if m.key == learned["key"]]
    again = play_matchup(matchup, str(tmp_path / "again"))  # fresh run directory: nothing cached
    assert json.dumps(again["metrics"]) == json.dumps(learned["metrics"])
