"""The gradients report: success pooled over seeds against each defense's strength; the grid it draws."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from arena.games.gradients.grids import save_grid
from arena.games.gradients.sections import strength_points


def row(defense: str, attack: str, rate: float, trials: int, params: dict | None = None) -> dict:
    return {"status": "ok", "defense": defense, "attack_label": attack, "defense_params": params or {},
            "metrics": {"target_success_rate": rate, "n_trials": trials}}


def test_success_is_pooled_over_seeds_as_successes_over_trials_and_nonprivate_is_epsilon_infinity() -> None:
    rows = [row("client-dpsgd", "idlg", 0.5, 10, {"epsilons": [8.0]}),
            row("client-dpsgd", "idlg", 0.0, 30, {"epsilons": [8.0]}),
            row("client-dpsgd", "idlg", 0.0, 20, {"epsilons": [1.0]}),
            row("nonprivate", "idlg", 1.0, 20),
            row("gradient-pruning", "idlg", 0.9, 20, {"rates": [0.5]}),
            {"status": "failed", "defense": "nonprivate", "attack_label": "idlg", "metrics": {}}]
    points = strength_points(rows, "client-dpsgd", "epsilons")
    assert points == {"idlg": [(1.0, 0.0), (8.0, 5 / 40), (float("inf"), 1.0)]}
    assert strength_points(rows, "gradient-pruning", "rates") == {"idlg": [(0.0, 1.0), (0.5, 0.9)]}


def test_the_grid_is_written_with_its_vector_copies(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    arrays = {"records": rng.random((3, 64)), "reconstructions": rng.random((3, 64)), "psnr": np.array([9.0, 30, 100]),
              "is_target": np.array([1.0, 0, 0])}
    path = save_grid(tmp_path / "a" / "grid.png", arrays, kind="image", shape=(1, 8, 8), batch_size=3)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.with_suffix(".svg").is_file() and path.with_suffix(".pdf").is_file()
