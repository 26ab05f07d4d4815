"""Trust zones (``arena.trust``): untrusted attack distributions installed into a site of their own, which only
sandboxed processes load (their ``.pth`` start-up files included); a distribution that registers attacks with a
kind the arena runs in its own process is refused unless trusted by name; a broken distribution fails only the
scenarios that name it; no order of imports lets ``registries()`` import attack code in the caller's process."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

import arena.pipeline  # noqa: F401 - the sandbox's catalog, as every command has it
from arena.cli import EXIT_INPUT, EXIT_OK, main
from arena.plugins import build_registries
from arena.registry import UnknownNameError
from arena.session import Session
from tests.conftest import TEST_SECRET, TINY, shared_dir, write_scenario

ROOT = Path(__file__).resolve().parents[1]

ATTACK = """
from arena import Attack, MembershipGuess, hookimpl


class Coin(Attack):
    name = "{name}"
    game = "membership"
    threat_model = frozenset({{"query"}})

    def run(self, view):
        import numpy as np
        scores = np.zeros(len(view.challenge_y))
        return MembershipGuess(scores, scores > 0)


@hookimpl
def register_attacks(register):
    register(Coin)
"""

MIXED = ATTACK.format(name="mixed-coin") + """

from arena import Metric


@hookimpl
def register_metrics(register):
    register(Metric("mixed-metric", "membership", True, "a mixed distribution's metric"))
"""


def _distribution(regs, name: str):
    (found,) = [d for d in regs.distributions if d.name == name]
    return found


def _tiny_with(tmp_path: Path, attack: str) -> Path:
    return write_scenario(tmp_path / "named.yaml", TINY.replace("{name: threshold-mia}", f"{{name: {attack}}}"))


def test_an_attack_and_metric_distribution_is_refused_unless_trusted_by_name(plugin_dist, tmp_path, capsys,
                                                                             monkeypatch) -> None:
    monkeypatch.setenv("ARENA_TRUSTED", "")
    plugin_dist("arena-mixed", "arena_mixed_plugin", MIXED)
    regs = build_registries()
    mixed = _distribution(regs, "arena-mixed")
    assert mixed.zone == "broken" and "ARENA_TRUSTED=arena-mixed" in mixed.problem, mixed
    assert "arena_mixed_plugin" not in sys.modules, "its code never ran in the arena's process"
    assert "mixed-coin" not in regs.attacks and "mixed-metric" not in regs.metrics
    with pytest.raises(UnknownNameError, match=r"attack 'mixed-coin' is unavailable: its distribution arena-mixed "
                                               r"1.0 is broken: distribution 'arena-mixed' registers attacks "
                                               r"together with a metric"):
        regs.attacks.get("mixed-coin")

    # A scenario naming its attack is exit 2 naming the distribution; one that does not is valid.
    named = _tiny_with(tmp_path, "mixed-coin")
    assert main(["validate", str(named)]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert f"{named}: tracks[0].attacks[0].name: attack 'mixed-coin' is unavailable: its distribution " \
           "arena-mixed 1.0 is broken" in err, err
    assert main(["validate", str(write_scenario(tmp_path / "tiny.yaml", TINY))]) == EXIT_OK

    # Trusted by name (--trust, which sets ARENA_TRUSTED for the processes it starts): imported here, as the
    # user asked, and listed so.
    assert main(["plugins", "--trust", "arena-mixed"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "  arena-mixed 1.0: arena process (installed in the arena environment; trusted by name)" in out, out
    assert os.environ["ARENA_TRUSTED"] == "arena-mixed"
    regs = build_registries()
    assert "mixed-coin" in regs.attacks and "mixed-metric" in regs.metrics
    assert "arena_mixed_plugin" in sys.modules
    assert main(["validate", str(named)]) == EXIT_OK


BROKEN_AT_IMPORT = """
from arena import hookimpl

raise RuntimeError("boom at import")


@hookimpl
def register_defenses(register):
    pass
"""

BROKEN_AT_REGISTRATION = """
from arena import Attack, hookimpl


class NotAnAttack:
    name = "nope"


@hookimpl
def register_attacks(register):
    register(NotAnAttack)
"""


def test_a_broken_distribution_fails_only_the_scenarios_that_name_it(plugin_dist, tmp_path, capsys) -> None:
    plugin_dist("arena-boom", "arena_boom_plugin", BROKEN_AT_IMPORT)
    plugin_dist("arena-bad", "arena_bad_plugin", BROKEN_AT_REGISTRATION)
    plugin_dist("arena-fine", "arena_fine_plugin", ATTACK.format(name="fine-coin"))

    assert main(["plugins"]) == EXIT_OK
    out = capsys.readouterr().out
    lines = {line.split(":")[0].strip(): line.strip() for line in out.splitlines() if line.startswith("  arena-")}
    assert lines["arena-boom 1.0"].startswith("arena-boom 1.0: broken: plugin 'arena-boom:arena_boom_plugin' "
                                              "(arena_boom_plugin) failed to load: RuntimeError('boom at import')")
    assert lines["arena-bad 1.0"] == ("arena-bad 1.0: broken: plugin 'arena-bad:arena_bad_plugin' registered the "
                                      "class NotAnAttack as an attack, but it is not a subclass of arena.Attack; "
                                      "register a subclass of arena.Attack")
    assert lines["arena-fine 1.0"] == "arena-fine 1.0: attack sandbox (installed in the arena environment)"
    assert "fine-coin                from arena-fine 1.0" in out

    # An unrelated scenario, and one naming the healthy distribution's attack, are valid.
    assert main(["validate", str(write_scenario(tmp_path / "tiny.yaml", TINY))]) == EXIT_OK
    assert main(["validate", str(_tiny_with(tmp_path, "fine-coin"))]) == EXIT_OK
    capsys.readouterr()
    # A scenario naming what a broken one would provide: exit 2, one line naming the broken distributions.
    named = _tiny_with(tmp_path, "nope")
    assert main(["validate", str(named)]) == EXIT_INPUT
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{named}: tracks[0].attacks[0].name: unknown attack 'nope'"), line
    assert ("third-party distributions not loaded, which may provide it: arena-bad 1.0 (broken); arena-boom 1.0 "
            "(broken) (see `arena plugins`)") in line, line


IMPORT_ORDERS = {
    "the plugin loader alone": "import arena.plugins",
    "the contracts, then the loader": "import arena.contracts.attack, arena.registry, arena.plugins",
    "the pipeline first": "import arena.pipeline.plan, arena.plugins",
    "the results first": "import arena.results.games, arena.plugins",
}


@pytest.mark.subprocess
@pytest.mark.parametrize(("trusted", "orders"), [(False, list(IMPORT_ORDERS)),
                                                 (True, ["the contracts, then the loader"])],
                         ids=["untrusted", "trusted by name"])
def test_no_order_of_imports_lets_registries_import_an_attack_only_distribution(plugin_dist, trusted,
                                                                                  orders) -> None:
    """Whatever the order of imports, ``registries()`` never imports a third-party distribution that registers
    attacks only into the caller's process, trusted by name or not: the package's root establishes the session,
    with the attack sandbox's catalog, before any module can call it; its attacks are listed from the sandbox."""
    plugin_dist("arena-marker", "arena_marker_plugin", ATTACK.format(name="marker-coin"))
    code = textwrap.dedent("""
        import json, sys
        exec(sys.argv[1])
        regs = arena.plugins.registries()
        print(json.dumps({"imported": "arena_marker_plugin" in sys.modules, "attack": "marker-coin" in regs.attacks,
                          "lines": [d.describe() for d in regs.distributions]}))
    """)
    env = {**os.environ, "ARENA_RUN_SECRET": TEST_SECRET, "ARENA_TRUSTED": "arena-marker" if trusted else ""}
    sandboxed = ("arena-marker 1.0: attack sandbox (installed in the arena environment"
                 + ("; trusted by name)" if trusted else ")"))
    for order in orders:
        done = subprocess.run([sys.executable, "-c", code, IMPORT_ORDERS[order]], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, (order, done.stderr)
        seen = json.loads(done.stdout.splitlines()[-1])
        assert seen == {"imported": False, "attack": True, "lines": [sandboxed]}, (order, seen)


def test_without_a_sandbox_catalog_only_distributions_trusted_by_name_are_imported(plugin_dist,
                                                                                   monkeypatch) -> None:
    monkeypatch.setenv("ARENA_TRUSTED", "")
    plugin_dist("arena-marker", "arena_marker_plugin", ATTACK.format(name="marker-coin"))
    regs = build_registries(Session(catalog=None))  # a session built without the attack sandbox
    assert _distribution(regs, "arena-marker").describe() == (
        "arena-marker 1.0: not loaded: not loaded in this process: its session has no attack sandbox to look at it "
        "first (arena.session)")
    assert "arena_marker_plugin" not in sys.modules and "marker-coin" not in regs.attacks
    monkeypatch.setenv("ARENA_TRUSTED", "Arena_Marker")  # names compare as PEP 503 normalises them
    regs = build_registries(Session(catalog=None))
    assert _distribution(regs, "arena-marker").zone == "arena process" and "marker-coin" in regs.attacks


# --- an untrusted attack distribution whose wheel carries a start-up file (.pth) ---

PTH_LINE = (
    "import os, sys; d = os.environ.get('PTH_MARKERS'); c = sys.modules.get('arena.pipeline.sandbox.child'); "
    "k = 'sandbox' if c is not None and getattr(c, '_ATTACK_PROCESS', False) else 'arena-process'; "
    "d and open(os.path.join(d, k + '.' + str(os.getpid())), 'w').write(str(os.getuid()))\n"
)

SCENARIO = """
name: untrusted
seeds: [0]
timeout: 240
tracks:
  - name: digits
    dataset: {name: digits}
    model: {name: logreg}
    training: {epochs: 5, batch_size: 32, lr: 0.5}
    game: {name: membership, members: 30, test: 100, population: 200}
    defenses:
      - {name: nonprivate}
    attacks:
      - {name: threshold-mia}
      - {name: pth-coin}
"""


def _wheel(folder: Path) -> Path:
    """A wheel by hand: an attack module, a ``.pth`` start-up file at the top of the site, its metadata."""
    files = {
        "arena_pth_attack.py": ATTACK.format(name="pth-coin"),
        "arena_pth_attack.pth": PTH_LINE,
        "arena_pth-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: arena-pth\nVersion: 1.0\n",
        "arena_pth-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\n"
                                         "Tag: py3-none-any\n",
        "arena_pth-1.0.dist-info/entry_points.txt": "[arena]\narena_pth_attack = arena_pth_attack\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    record.append("arena_pth-1.0.dist-info/RECORD,,")
    files["arena_pth-1.0.dist-info/RECORD"] = "\n".join(record) + "\n"
    wheel = folder / "arena_pth-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return wheel


@pytest.fixture
def markers():
    folder = shared_dir("arena-pth-markers-")  # the sandbox's users write there, outside the swept scratch roots
    yield folder
    for p in folder.iterdir():
        p.unlink()
    folder.rmdir()


def _arena(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "arena.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600, check=False)


@pytest.mark.slow
@pytest.mark.subprocess
def test_an_untrusted_wheels_start_up_file_runs_only_in_the_sandbox(tmp_path: Path, markers: Path) -> None:
    site = tmp_path / "untrusted"
    env = {**os.environ, "ARENA_RUN_SECRET": TEST_SECRET, "PTH_MARKERS": str(markers), "ARENA_UNTRUSTED_SITE":
           str(site)}
    env.pop("ARENA_LOAD_PLUGINS", None)
    installed = _arena(env, tmp_path, "plugins", "install", str(_wheel(tmp_path)), "--pip-option=--no-index")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert (site / "arena_pth_attack.pth").is_file() and (site / "arena_pth_attack.py").is_file()
    assert not list(markers.iterdir()), "installing a wheel runs none of its code"

    listing = _arena(env, tmp_path, "plugins")
    assert listing.returncode == 0, listing.stderr
    assert "  arena-pth 1.0: attack sandbox (installed in the untrusted site)" in listing.stdout, listing.stdout
    assert "pth-coin                 from arena-pth 1.0" in listing.stdout
    kinds = {p.name.split(".")[0] for p in markers.iterdir()}
    assert kinds == {"sandbox"}, f"its start-up file ran in the arena's process: {kinds}"

    for p in markers.iterdir():
        p.unlink()
    scenario = write_scenario(tmp_path / "untrusted.yaml", SCENARIO)
    run = _arena(env, tmp_path, "run", str(scenario), "--out", str(tmp_path / "run"), "--serial", "--no-report")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "third-party: arena-pth 1.0: attack sandbox (installed in the untrusted site)" in run.stderr, run.stderr
    rows = {r["attack"]: r for r in map(json.loads, (tmp_path / "run" / "results.jsonl").read_text().splitlines())}
    assert rows["pth-coin"]["status"] == "ok" and rows["pth-coin"]["metrics"]["auc"] == 0.5, rows["pth-coin"]
    assert rows["threshold-mia"]["status"] == "ok"
    seen = sorted(markers.iterdir())
    assert seen and {p.name.split(".")[0] for p in seen} == {"sandbox"}, [p.name for p in seen]
    if os.geteuid() == 0:  # run as root: each time as a sandbox user, never the arena's
        assert all(int(p.read_text()) != 0 for p in seen)


KILLS_ITS_PROCESS = """
import os

os._exit(3)
"""


def test_a_distribution_that_kills_the_catalogs_process_is_broken_alone(plugin_dist, capsys) -> None:
    plugin_dist("arena-killer", "arena_killer_plugin", KILLS_ITS_PROCESS)
    plugin_dist("arena-fine", "arena_fine_plugin", ATTACK.format(name="fine-coin"))
    regs = build_registries()
    killer, fine = _distribution(regs, "arena-killer"), _distribution(regs, "arena-fine")
    assert killer.zone == "broken" and killer.problem.startswith("distribution 'arena-killer': the attack sandbox "
                                                                 "could not catalog"), killer
    assert fine.zone == "attack sandbox" and "fine-coin" in regs.attacks


def _site_dist(site: Path, dist: str, module: str, source: str) -> None:
    """A distribution as ``pip install --target`` leaves it: the module and its ``.dist-info``."""
    site.mkdir(exist_ok=True)
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[arena]\n{module} = {module}\n")


DEFENSE = """
from arena import hookimpl
from arena_plugins.defenses import NonPrivate


class Again(NonPrivate):
    name = "site-defense"


@hookimpl
def register_defenses(register):
    register(Again)
"""


@pytest.mark.subprocess
def test_the_untrusted_site_is_read_by_metadata_and_serves_attacks_only(tmp_path, monkeypatch, capsys) -> None:
    site = tmp_path / "untrusted"
    _site_dist(site, "arena-site-attack", "arena_site_attack", ATTACK.format(name="site-coin"))
    _site_dist(site, "arena-site-defense", "arena_site_defense", DEFENSE)
    monkeypatch.setenv("ARENA_UNTRUSTED_SITE", str(site))
    monkeypatch.setenv("ARENA_TRUSTED", "arena-site-defense")  # trust does not reach into the untrusted site
    regs = build_registries()
    assert _distribution(regs, "arena-site-attack").describe() == \
        "arena-site-attack 1.0: attack sandbox (installed in the untrusted site)"
    defense = _distribution(regs, "arena-site-defense")
    assert defense.zone == "broken" and "installed in the untrusted site" in defense.problem \
        and "registers a defense" in defense.problem, defense
    assert str(site) not in sys.path and not {"arena_site_attack", "arena_site_defense"} & set(sys.modules)
    assert "site-defense" not in regs.defenses
    # Its attack's parameters are validated in the sandbox, which adds the site to its own path.
    assert main(["validate", str(_tiny_with(tmp_path, "site-coin"))]) == EXIT_OK, capsys.readouterr().err
