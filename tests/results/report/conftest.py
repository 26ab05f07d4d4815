"""A run directory written by hand: result rows, saved scores, a grid PNG and a hostile scenario, in milliseconds.

Plugin and scenario strings carry HTML (and a matplotlib '$') so every test sees whether they are escaped.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from arena.games.membership.metrics import membership_scores
from arena.pipeline.store import RunStore

EVIL_DEFENSE = "<script>alert(1)</script>"
EVIL_ATTACK = "<img src=x onerror=alert(2)> $\\frac$"
EVIL_SCENARIO = "name: evil  # </pre><script>alert('scenario')</script>\nseeds: [0, 1]\n"
DELTA = 1e-5


@dataclass(frozen=True)
class FakeRun:
    store: RunStore
    violating_key: str  # the dpsgd(eps=1) matchup whose scores separate perfectly
    grid_key: str  # the reconstruction matchup with a grid.png
    grid_png: bytes


def _png() -> bytes:
    fig = Figure(figsize=(2, 2))
    fig.add_subplot().imshow(np.arange(16).reshape(4, 4))
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def membership_row(store: RunStore, key: str, defense: str, eps: float | None, attack: str, seed: int,
                   separation: float) -> dict:
    """An ok membership row with 100 + 100 Gaussian scores, members shifted by ``separation`` (inf: perfectly)."""
    rng = np.random.default_rng(seed)
    is_member = np.array([1] * 100 + [0] * 100, dtype=np.int8)
    scores = rng.normal(size=200) + (np.where(is_member == 1, 100.0, 0.0) if np.isinf(separation)
                                     else separation * is_member)
    metrics, notes, points = membership_scores(scores, is_member, scores > 0.5)
    store.save_arrays(key, {"scores": torch.from_numpy(scores), "is_member": torch.from_numpy(is_member)})
    label = defense if eps is None else f"{defense}(eps={eps:g})"
    return {
        "key": key, "track": "digits-mlp", "game": "membership", "defense": defense, "defense_label": label,
        "epsilon": eps, "delta": None if eps is None else DELTA, "attack": attack, "attack_label": attack,
        "seed": seed, "status": "ok",
        "utility": 0.9 - 0.01 * seed - (0.3 if eps is not None and eps < 2 else 0.0), "metrics": metrics,
        "operating_points": points,
        "notes": notes, "claim": None if eps is None else {"epsilon": eps * 0.99, "delta": DELTA},
        "error": None, "seconds": 1.5 + seed, "trained_models": 1,
    }


def secret_store(root) -> RunStore:  # root: a path
    """A run directory with the test suite's fixed secret already kept in it: a module-scoped fixture is set up
    before the per-test secret of ``tests/conftest.py``, and every artifact it writes must be authenticated by the
    secret the tests read it with."""
    from tests.conftest import TEST_SECRET

    store = RunStore(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ARENA_RUN_SECRET", TEST_SECRET)
        store.secret()
    return store


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory: pytest.TempPathFactory) -> FakeRun:
    store = secret_store(tmp_path_factory.mktemp("fake") / "run")
    rows = []
    for seed in (0, 1):
        for j, (attack, strength) in enumerate((("threshold-mia", 1.0), (EVIL_ATTACK, 0.5))):
            rows.append(membership_row(store, f"np-a{j}-{seed}", "nonprivate", None, attack, seed, strength))
            rows.append(membership_row(store, f"ev-a{j}-{seed}", EVIL_DEFENSE, None, attack, seed, strength))
            rows.append(membership_row(store, f"d8-a{j}-{seed}", "dpsgd", 8.0, attack, seed, strength / 2))
            separation = np.inf if (j, seed) == (0, 0) else 0.0
            rows.append(membership_row(store, f"d1-a{j}-{seed}", "dpsgd", 1.0, attack, seed, separation))
    rows.append({**rows[0], "key": "failed-one", "seed": 2, "status": "failed", "metrics": {}, "utility": None,
                 "error": "RuntimeError: <b>boom</b>"})
    grid = _png()
    for seed in (0, 1):
        key = f"recon-{seed}"
        rows.append({
            "key": key, "track": "digits-recon", "game": "reconstruction", "defense": "dpsgd",
            "defense_label": "dpsgd(eps=1)", "epsilon": 1.0, "delta": DELTA, "attack": "gradient-inversion",
            "attack_label": "gradient-inversion",
            "seed": seed, "status": "ok", "utility": 0.7, "notes": [], "error": None, "seconds": 3.0,
            "metrics": {"success_rate": 0.2 + 0.1 * seed, "n_targets": 50, "kappa": 0.05},
            "claim": {"epsilon": 1.0, "delta": DELTA}, "trained_models": 4,
        })
        (store.artifact_dir(key)).mkdir(parents=True)
        (store.artifact_dir(key) / "grid.png").write_bytes(grid)
    for row in rows:
        store.append_result(row)
    store.write_text("scenarios/evil.yaml", EVIL_SCENARIO)
    return FakeRun(store, "d1-a0-0", "recon-0", grid)


@pytest.fixture(scope="module")
def report_text(fake_run: FakeRun) -> str:
    """The report of the fake run, written once per test module."""
    from arena.results.report.html import write_report

    return write_report(fake_run.store.root, ("svg", "pdf")).read_text(encoding="utf-8")


# A track as a researcher's benchmark has it: 5 defenses with recipe overrides (long labels), one of them a heuristic
# that claims no ε, 6 attacks, 2 seeds, scores saved with their bootstrap draws as a run saves them.
WIDE_TRACK = "digits-wide"
WIDE_DEFENSES = (  # (plugin, label, target ε, claim)
    ("nonprivate", "nonprivate(training.lr=2.0, training.ema=0.9)", None, None),
    ("mixup", "mixup(alpha=0.4, training.epochs=40)", None, None),
    ("dpsgd", "dpsgd(eps=8, training.batch_size=128, training.lr=2.0)", 8.0, {"epsilon": 7.9, "delta": DELTA}),
    ("dpsgd", "dpsgd(eps=1, training.batch_size=128, training.lr=2.0)", 1.0, {"epsilon": 0.99, "delta": DELTA}),
    ("output-perturbation", "output-perturbation(eps=2)", 2.0, {"epsilon": 2.0, "delta": DELTA}),
)
WIDE_ATTACKS = ("threshold-mia", "threshold-mia(signal=confidence)", "shadow-mia(classifier=logistic, shadows=16)",
                "lira(fixed_variance=True, shadows=16)", "rmia(shadows=4, gamma=2.0)", "calibrated-loss(temperature=2)")


@pytest.fixture(scope="module")
def wide_run(tmp_path_factory: pytest.TempPathFactory) -> RunStore:
    from arena.engine.seeds import RESAMPLES, resample_seed
    from arena.games.membership.metrics import resample
    from arena.pipeline.execute import game_columns

    store = secret_store(tmp_path_factory.mktemp("wide") / "run")
    columns = game_columns("membership")
    for i, (plugin, label, eps, claim) in enumerate(WIDE_DEFENSES):
        for j, attack in enumerate(WIDE_ATTACKS):
            for seed in (0, 1):
                key = f"w{i}-{j}-{seed}"
                rng = np.random.default_rng(1000 * i + 10 * j + seed)
                is_member = np.r_[np.ones(200, np.int8), np.zeros(200, np.int8)]
                shift = (1.5 - 0.25 * i) * (0.5 + 0.15 * j)
                scores = rng.normal(size=400) + shift * is_member
                metrics, notes, points = membership_scores(scores, is_member, scores > 0.5)
                arrays = {"scores": scores, "is_member": is_member}
                store.save_arrays(key, {k: torch.from_numpy(v) for k, v in arrays.items()})
                store.save_draws(key, resample(arrays, list(metrics), resamples=RESAMPLES, seed=resample_seed(key)))
                store.append_result({
                    "key": key, "scenario": "wide", "track": WIDE_TRACK, "game": "membership", "defense": plugin,
                    "defense_label": label, "epsilon": eps, "delta": None if eps is None else DELTA,
                    "attack": attack.split("(")[0], "attack_label": attack, "seed": seed, "status": "ok",
                    "utility": 0.95 - 0.08 * i + 0.01 * seed, "metrics": metrics, "operating_points": points,
                    "notes": notes, "claim": claim, "error": None, "seconds": 1.0, "trained_models": 1, **columns,
                })
    return store
