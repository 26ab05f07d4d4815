"""The base of every plugin's parameters: pydantic, unknown keys forbidden, frozen (hashable, never mutated)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class PluginParams(BaseModel):
    """Base of a plugin's ``Params``: a scenario entry's keys other than ``name``, validated; an unknown key is an
    error naming its field path, and a validated configuration cannot change."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class NoParams(PluginParams):
    """Parameters of a plugin that takes none."""
