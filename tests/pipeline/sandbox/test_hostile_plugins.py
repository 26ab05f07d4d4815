"""Attack plugins whose module, at import, and whose parameters' validator try to read the run secret and sabotage
the arena (patch the game's view to leak the membership and its scoring to say AUC 1): they run only in the
sandbox, so they see no secret, patch nothing of the arena's, and fail (or score at chance) only their own
matchups, while an honest attack beside them keeps its result; their bad parameters are still refused at
validation, naming file and field, with nothing written.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from arena.pipeline.sandbox import Limits
from arena.pipeline.scenario import ScenarioError
from arena.pipeline.store import SECRET_ENV, RunStore
from tests.conftest import TEST_SECRET, shared_dir

pytestmark = [pytest.mark.slow]

PLUGIN = '''
import json, os

import numpy as np
from pydantic import Field, field_validator

from arena import Attack, MembershipGame, MembershipGuess, PluginParams, hookimpl


def note(kind):
    """What this process saw (and, where it could, the secret), and the game patched to give itself away."""
    folder = os.environ.get("HOSTILE_DIR")
    if folder:
        with open(os.path.join(folder, f"{kind}.{os.getpid()}.json"), "w") as f:
            json.dump({"pid": os.getpid(), "uid": os.getuid(), "secret": os.environ.get("ARENA_RUN_SECRET"),
                       "readable": _read(os.environ.get("HOSTILE_RUN", ""))}, f)
    original = MembershipGame.view

    def view(game, attack, release, procedure):
        os.environ["HOSTILE_PLUGIN_STASH"] = json.dumps([float(m) for m in game._is_member])
        return original(game, attack, release, procedure)

    MembershipGame.view = view
    MembershipGame.score = lambda game, attack, guess: (_ for _ in ()).throw(RuntimeError("sabotaged"))


def _read(run):
    try:
        return open(os.path.join(run, ".arena-secret"), "rb").read().hex()
    except OSError as exc:
        return type(exc).__name__


note("import")


class Params(PluginParams):
    bias: float = Field(default=0.5, gt=0, lt=1)

    @field_validator("bias")
    @classmethod
    def sabotage(cls, value):
        note("validator")
        return value


class AtImport(Attack):
    name = "hostile-at-import"
    game = "membership"
    threat_model = frozenset({"query"})
    Params = Params

    def run(self, view):
        found = os.environ.get("HOSTILE_PLUGIN_STASH")
        n = len(view.challenge_y)
        scores = np.array(json.loads(found)) if found else np.zeros(n)
        return MembershipGuess(scores=scores, decisions=scores > 0.5)


@hookimpl
def register_attacks(register):
    register(AtImport)
'''

SCENARIO = """
name: hostile-plugins
seeds: [0]
timeout: 240
tracks:
  - name: digits
    dataset: {name: digits}
    model: {name: logreg}
    training: {epochs: 30, batch_size: 16, lr: 0.5}
    game: {name: membership, members: 30, test: 100, population: 200}
    defenses:
      - {name: nonprivate}
    attacks:
%s
"""


def scenario(path: Path, attacks: list[str]) -> Path:
    path.write_text(textwrap.dedent(SCENARIO % "\n".join(f"      - {{{a}}}" for a in attacks)))
    return path


@pytest.fixture
def notes(monkeypatch: pytest.MonkeyPatch):
    folder = shared_dir("arena-hostile-plugins-")  # the sandbox's users write what they saw here
    monkeypatch.setenv("HOSTILE_DIR", str(folder))
    yield folder
    for p in folder.iterdir():
        p.unlink()
    folder.rmdir()


def seen(notes: Path, kind: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(notes.glob(f"{kind}.*.json"))]


def sandboxed(observed: list[dict]) -> None:
    """Each observation was made in another process than this one, without the secret, and (run as root) as an
    attack's own user, who could not read the run directory."""
    assert observed, "the plugin's code ran"
    for o in observed:
        assert o["pid"] != os.getpid() and o["secret"] is None, o
        if os.geteuid() == 0:
            assert o["uid"] >= Limits.from_env().uid_base, o
            assert o["readable"] in ("PermissionError", "FileNotFoundError"), o


def test_an_attack_plugins_import_and_validator_run_only_in_the_sandbox(plugin_dist, notes: Path, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from arena.api import run
    from arena.games.membership import MembershipGame

    out = tmp_path / "run"
    monkeypatch.setenv(SECRET_ENV, TEST_SECRET)
    monkeypatch.setenv("HOSTILE_RUN", str(out))
    monkeypatch.delenv("HOSTILE_PLUGIN_STASH", raising=False)  # only the attack's own leak may set it
    view, score = MembershipGame.view, MembershipGame.score
    honest = "name: threshold-mia"
    run(scenario(tmp_path / "reference.yaml", [honest]), tmp_path / "reference", serial=True, report=False)
    (reference,) = RunStore(tmp_path / "reference").results()
    plugin_dist("arena-hostile-plugins", "arena_hostile_plugins", PLUGIN)
    run(scenario(tmp_path / "s.yaml", [honest, "name: hostile-at-import, bias: 0.3"]), out, serial=True,
        report=False)
    rows = {r["attack"]: r for r in RunStore(out).results()}
    assert "arena_hostile_plugins" not in sys.modules, "the arena never imported the attack's module"
    assert (MembershipGame.view, MembershipGame.score) == (view, score), "nothing of the arena's was patched"
    assert rows["threshold-mia"]["status"] == "ok"
    assert rows["threshold-mia"]["metrics"] == reference["metrics"], "the honest attack scored as without it"
    hostile = rows["hostile-at-import"]
    assert hostile["status"] == "ok" and hostile["metrics"]["auc"] == 0.5, (hostile["status"], hostile["error"])
    assert hostile["attack_params"] == {"bias": 0.3}, "its parameters as the sandbox validated them"
    sandboxed(seen(notes, "import"))
    sandboxed(seen(notes, "validator"))


def test_an_attack_plugins_bad_parameters_are_refused_with_file_and_field(plugin_dist, notes: Path,
                                                                          tmp_path: Path, capsys) -> None:
    from arena.cli import EXIT_INPUT, main

    plugin_dist("arena-hostile-plugins", "arena_hostile_plugins", PLUGIN)
    path = scenario(tmp_path / "bad.yaml", ["name: hostile-at-import, bias: 7", "name: hostile-at-import, typo: 1"])
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--serial"]) == EXIT_INPUT
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("third-party: ")]
    assert err == [f"{path}: tracks[0].attacks[0].bias: Input should be less than 1",
                   f"{path}: tracks[0].attacks[1].typo: Extra inputs are not permitted"], err
    assert not out.exists(), "nothing written"
    assert main(["plugins"]) == 0
    listing = capsys.readouterr().out
    assert "hostile-at-import        from arena-hostile-plugins 1.0" in listing, listing
    assert "  arena-hostile-plugins 1.0: attack sandbox (installed in the arena environment)" in listing, listing
    assert "arena_hostile_plugins" not in sys.modules, "neither validated nor listed here"
    sandboxed(seen(notes, "import"))
    with pytest.raises(ScenarioError):  # the plan itself, as the API raises it
        from arena.pipeline.plan import plan

        plan([path])
