"""The wheel ships every package: ``tool.setuptools.packages`` lists each folder of ``arena`` that holds Python
modules or templates (a package left out installs in editable mode, through the source tree, and is missing from
a wheel), and each folder of templates has them as its package data."""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_and_template_folder_is_listed_for_the_wheel() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    folders = {".".join(p.relative_to(ROOT).parts) for p in (ROOT / "arena").rglob("*")
               if p.is_dir() and p.name != "__pycache__" and any(p.glob("*.py")) | any(p.glob("*.j2"))}
    assert folders | {"arena"} <= listed, sorted(folders - listed)
    data = config["package-data"]
    for folder in folders:
        if any((ROOT / Path(*folder.split("."))).glob("*.j2")):
            assert "*.j2" in data.get(folder, []), folder
    assert config["package-dir"]["arena_plugins"] == "plugins" and "arena_plugins" in listed
