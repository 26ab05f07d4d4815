"""Two real run directories of one benchmark, made with different secrets (``two_runs``, once per session): the
track ``shared`` is the same in both (its seeds pool), the track ``clash`` is trained for 3 epochs in one and 4 in
the other (two definitions under one name: shown apart)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

import arena

TRACK = """
  - name: {name}
    dataset: {{name: digits}}
    model: {{name: logreg}}
    training: {{epochs: {epochs}, batch_size: 64, lr: 0.1, momentum: 0.9}}
    game: {{name: membership, members: 50, test: 100}}
    defenses:
      - {{name: nonprivate}}
    attacks:
      - {{name: threshold-mia}}
"""


def scenario(clash_epochs: int) -> str:
    return ("name: bench\nseeds: [0]\ntracks:" + TRACK.format(name="shared", epochs=3)
            + TRACK.format(name="clash", epochs=clash_epochs))


SECRETS = {"a": "a1" * 32, "b": "b2" * 32}


@dataclass(frozen=True)
class TwoRuns:
    a: Path
    b: Path


@pytest.fixture(scope="session")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> TwoRuns:
    root = tmp_path_factory.mktemp("benchmark")
    with pytest.MonkeyPatch.context() as mp:
        for name, epochs in (("a", 3), ("b", 4)):
            mp.setenv("ARENA_RUN_SECRET", SECRETS[name])
            path = root / f"{name}.yaml"
            path.write_text(scenario(epochs))
            results = arena.run(path, out=root / f"run-{name}", serial=True, report=False)
            assert results.counts["ok"] == 2, results.failed
    return TwoRuns(root / "run-a", root / "run-b")
