"""Which code made a row: every plugin that shapes a matchup (game, dataset, model, defense, attack) is in its key
and its row with name and version, and, installed locally or in editable mode, a hash of the source files its
class's module reads (its own package's modules it imports, nothing else)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from arena.pipeline import provenance
from arena.pipeline.execute import base_row
from arena.pipeline.plan import plan
from arena.pipeline.provenance import Provenance, install_kind, source_files, source_hash
from arena.pipeline.store import RunStore
from tests.conftest import TINY, write_scenario

ATTACK = '''
from arena import Attack, MembershipGuess, hookimpl


class Echo(Attack):
    name = "echo"
    game = "membership"
    version = "{version}"
    threat_model = frozenset({{"query"}})

    def run(self, view):
        scores = -view.model.loss(view.challenge_X, view.challenge_y).double().numpy()
        return MembershipGuess(scores=scores, decisions=scores > 0)


@hookimpl
def register_attacks(register):
    register(Echo)
'''


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A plugin package on the path: ``pkg.plugin`` imports ``pkg.helpers`` (relatively) and ``pkg.deep.util``
    (absolutely, inside a function); ``pkg.unrelated`` is imported by nobody."""
    root = tmp_path / "src"
    (root / "pkg" / "deep").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "deep" / "__init__.py").write_text("")
    (root / "pkg" / "deep" / "util.py").write_text("X = 1\n")
    (root / "pkg" / "helpers.py").write_text("import json\n\nSCALE = 1.0\n")
    (root / "pkg" / "unrelated.py").write_text("Y = 2\n")
    (root / "pkg" / "plugin.py").write_text(
        "from . import helpers\nfrom .helpers import SCALE\n\n\ndef f():\n    import pkg.deep.util\n"
        "    return pkg.deep.util.X * SCALE * helpers.SCALE\n")
    monkeypatch.syspath_prepend(str(root))
    for name in [m for m in sys.modules if m == "pkg" or m.startswith("pkg.")]:
        monkeypatch.delitem(sys.modules, name)
    provenance.clear_cache()
    yield root
    provenance.clear_cache()


def test_the_source_is_the_module_and_what_it_imports_from_its_package(package: Path) -> None:
    assert set(source_files("pkg.plugin")) == {"pkg.plugin", "pkg", "pkg.helpers", "pkg.deep", "pkg.deep.util"}
    before = source_hash("pkg.plugin")
    (package / "pkg" / "unrelated.py").write_text("Y = 3\n")
    provenance.clear_cache()
    assert source_hash("pkg.plugin") == before, "a module the plugin never imports is not its source"
    (package / "pkg" / "deep" / "util.py").write_text("X = 2\n")
    provenance.clear_cache()
    assert source_hash("pkg.plugin") != before, "an edit of an imported module is an edit of the plugin"


def test_a_hash_is_computed_once_per_module_per_process(package: Path) -> None:
    first = source_hash("pkg.plugin")
    (package / "pkg" / "helpers.py").write_text("SCALE = 2.0\n")
    assert source_hash("pkg.plugin") == first  # cached: the code this process runs is the code it hashed
    provenance.clear_cache()
    assert source_hash("pkg.plugin") != first


def test_built_in_plugins_hash_their_own_modules_only() -> None:
    assert set(source_files("arena_plugins.rmia")) == {"arena_plugins", "arena_plugins.rmia",
                                                        "arena_plugins.membership", "arena_plugins.queries"}
    assert set(source_files("arena_plugins.relaxloss")) == {"arena_plugins", "arena_plugins.relaxloss"}
    # a game of the arena itself: its own folder, not the harness (covered by the arena's version)
    files = source_files("arena.games.membership.game")
    assert "arena.games.membership.game" in files and all(n.startswith("arena.games.membership") for n in files)


def test_the_install_kind_is_read_from_direct_url(plugin_dist) -> None:
    site = plugin_dist("arena-echo", "arena_echo", ATTACK.format(version="1"))
    assert install_kind("arena-echo") == "editable"
    info = next(site.glob("arena_echo-*.dist-info"))
    (info / "direct_url.json").write_text(json.dumps({"url": "file:///somewhere/arena_echo-1.0.whl",
                                                      "archive_info": {}}))
    assert install_kind("arena-echo") == "local"
    (info / "direct_url.json").write_text(json.dumps({"url": "https://example.org/e.whl", "archive_info": {}}))
    assert install_kind("arena-echo") == "index"
    (info / "direct_url.json").unlink()
    assert install_kind("arena-echo") == "index"
    assert install_kind("no-such-distribution") == "unknown"


def test_every_plugin_of_a_matchup_is_in_its_key_and_its_row(plugin_dist, tmp_path: Path) -> None:
    plugin_dist("arena-echo", "arena_echo", ATTACK.format(version="1"))
    path = write_scenario(tmp_path / "s.yaml", TINY.replace("- {name: threshold-mia}", "- {name: echo}"))
    m = plan([path]).matchups[0]
    code = m.provenance()
    assert set(code) == {"game", "dataset", "model", "defense", "attack"}
    assert code["attack"].source is not None and code["attack"].install == "editable"
    assert code["model"].name == "mlp" and code["dataset"].name == "digits"
    row = base_row(m)
    for kind in ("game", "dataset", "model", "defense", "attack"):
        assert row["versions"][kind] == code[kind].describe()
        assert (f"{kind}.source" in row["versions"]) == (code[kind].source is not None)
    assert row["versions"]["attack.source"] == f"sha256:{code['attack'].source} (editable)"
    for kind in ("dataset", "model", "game", "defense"):  # each one's code is in the release and matchup keys
        other = dataclasses.replace(code[kind], source="0" * 16)
        changed = (dataclasses.replace(m, code={**m.code, kind: other}) if kind != "defense" else
                   dataclasses.replace(m, defense=dataclasses.replace(m.defense, code=other)))
        assert changed.release_key != m.release_key and changed.key != m.key, kind
        bumped = dataclasses.replace(code[kind], version="99")
        assert bumped.identity() != code[kind].identity()
    other = dataclasses.replace(m, attack=dataclasses.replace(m.attack, code=dataclasses.replace(code["attack"],
                                                                                                  source="f" * 16)))
    assert other.release_key == m.release_key and other.key != m.key  # the attack is in the matchup key only


def test_the_attacks_version_is_read_statically_and_keys_it(plugin_dist, tmp_path: Path) -> None:
    from arena.plugins import forget_registries

    site = plugin_dist("arena-echo", "arena_echo", ATTACK.format(version="1"))
    path = write_scenario(tmp_path / "s.yaml", TINY.replace("- {name: threshold-mia}", "- {name: echo}"))
    before = {m.key for m in plan([path]).matchups}
    (site / "arena_echo.py").write_text(ATTACK.format(version="2"))
    sys.modules.pop("arena_echo", None)
    forget_registries()
    provenance.clear_cache()
    after = plan([path]).matchups
    assert {m.attack.code.version for m in after} == {"2"} and before.isdisjoint({m.key for m in after})


def test_a_training_procedures_cache_key_covers_the_code() -> None:
    from arena.pipeline.execute import procedure_for

    path = Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.yaml"
    m = plan([path]).matchups[0]
    store = RunStore(Path("/nonexistent"))
    procedure = procedure_for(m, store)
    assert set(procedure.identity()["code"]) == {"model", "defense"}
    edited = dataclasses.replace(m, defense=dataclasses.replace(
        m.defense, code=Provenance(**{**m.defense.code.__dict__, "source": "1" * 16})))
    assert procedure_for(edited, store).identity() != procedure.identity()


@pytest.mark.parametrize("nested", ["x = " + "[" * 5000 + "]" * 5000, "x = " + "(" * 300 + ")" * 300,
                                    "def f(:\n"])
def test_a_plugin_module_the_parser_cannot_read_is_one_line_and_exit_2(plugin_dist, tmp_path: Path, capsys,
                                                                       nested: str) -> None:
    """A module of an attack package, never imported at run time but named by an import statement, nested past the
    parser's limit (or not Python at all): the scenario is refused with one line naming the file, no traceback
    (issue 40, C)."""
    from arena.cli import main

    site = plugin_dist("arena-nest", "arena_nest", "")
    (site / "arena_nest.py").unlink()
    (site / "arena_nest").mkdir()
    (site / "arena_nest" / "__init__.py").write_text(
        ATTACK.format(version="1").replace('"echo"', '"nest"') + "\n\ndef never():\n    from . import deep\n")
    (site / "arena_nest" / "deep.py").write_text(nested + "\n")
    path = write_scenario(tmp_path / "s.yaml", TINY.replace("- {name: threshold-mia}", "- {name: nest}"))
    status = main(["validate", str(path)])
    out, err = capsys.readouterr()
    assert status == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "cannot parse" in lines[0] and "deep.py" in lines[0], err
    assert "Traceback" not in err and "nest" in lines[0]
