"""The catalog's membership attacks (qmia, reference, boundary, mentr) in real games: each finds the members of an
overfit model, and a tiny tournament plays them all through the arena, the shadow attacks sharing one pool."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from arena.contracts.spec import PluginRef
from arena.engine.recipe import Recipe
from arena.games.membership import MembershipGame, MembershipGameSpec
from arena.pipeline.plan import load_dataset, plan
from arena.pipeline.procedure import TrainingProcedure
from arena.pipeline.store import RunStore, TensorCache
from arena.pipeline.tournament import run
from arena_plugins.boundary import BoundaryMIA
from arena_plugins.defenses import NonPrivate
from arena_plugins.entropy import ModifiedEntropyMIA
from arena_plugins.qmia import QMIA
from arena_plugins.reference import ReferenceMIA
from tests.conftest import architecture

ATTACKS = [
    QMIA(QMIA.Params(epochs=200)),
    ReferenceMIA(ReferenceMIA.Params(variant="attack-p")),
    ReferenceMIA(ReferenceMIA.Params(variant="attack-r", shadows=8)),
    ReferenceMIA(ReferenceMIA.Params(variant="calibration", shadows=8)),
    BoundaryMIA(BoundaryMIA.Params(max_queries=200, population_records=50)),
    ModifiedEntropyMIA(ModifiedEntropyMIA.Params(shadows=8)),
]


@pytest.mark.slow
def test_every_catalog_attack_finds_members_of_an_overfit_model(tmp_path: Path) -> None:
    game = MembershipGame(MembershipGameSpec(name="membership", members=50, test=50, population=300),
                          load_dataset(PluginRef(name="digits")), seed=0)
    proc = TrainingProcedure(NonPrivate(NonPrivate.Params()), architecture("mlp", (1, 8, 8), 10, hidden=[32]),
                             Recipe(epochs=30, lr=0.1, momentum=0.9, batch_size=25), cache=TensorCache(tmp_path))
    release = game.release(proc)
    for attack in ATTACKS:
        outcome = game.play(attack, release, proc)
        assert outcome.metrics["auc"] > 0.6, (attack.name, attack.params, outcome.metrics["auc"])
        assert np.isfinite(outcome.arrays["scores"]).all()


SCENARIO = """
name: catalog-attacks-tiny
seeds: [0]
tracks:
  - name: digits-tiny
    dataset: {name: digits}
    model: {name: mlp, hidden: [16]}
    training: {epochs: 4, batch_size: 20, lr: 0.1, momentum: 0.9}
    game: {name: membership, members: 40, test: 50, population: 100}
    defenses:
      - {name: nonprivate}
    attacks:
      - {name: qmia, epochs: 50}
      - {name: reference, variant: attack-p}
      - {name: reference, variant: attack-r, shadows: 4}
      - {name: reference, variant: calibration, shadows: 4}
      - {name: boundary, max_queries: 50, iterations: 3, population_records: 20}
      - {name: mentr, shadows: 4}
"""


@pytest.mark.slow
def test_tiny_tournament_plays_the_catalog_attacks(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(SCENARIO)
    store = RunStore(tmp_path / "run")
    rows = run(plan([path]), store, serial=True)
    assert len(rows) == 6 and all(r["status"] == "ok" for r in rows), [r["error"] for r in rows]
    for row in rows:
        scores = store.load_arrays(row["key"])["scores"].numpy()
        assert len(scores) == 80 and np.isfinite(scores).all()
    models = sorted((tmp_path / "run" / "cache" / "models").iterdir())
    assert len(models) == 3, ("the release, ONE population pool of 4 for attack-r and calibration (their default "
                              "references, disjoint from the challenge) and mentr's challenge pool")
