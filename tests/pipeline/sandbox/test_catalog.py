"""What the arena takes from the sandbox's answers about plugins (``arena.pipeline.sandbox.catalog``): the plugin's
code could have written them, so they are data of a checked shape, printable and capped."""

from __future__ import annotations

import pytest

from arena.pipeline.sandbox.catalog import PARAMS_BYTES, _checked_answer, _checked_entry
from arena.pipeline.sandbox.static import static_attack
from arena.plugins import is_sandboxed, sandboxed_attack


def declared(**changes: object) -> dict:
    return {"kinds": ["register_attacks"], "attacks": [{"name": "coin", "game": "membership", "version": "1",
                                                        "entry": "arena_coin:Coin", "threat_model": ["query"],
                                                        "refused": None, **changes}]}


def test_an_attack_only_entry_is_kept_as_plain_declarations() -> None:
    entry = _checked_entry(declared())
    assert entry["attacks"][0]["threat_model"] == ["query"] and entry["registry_error"] is None
    cls = sandboxed_attack(entry["attacks"][0])
    assert is_sandboxed(cls) and not is_sandboxed(type("Other", (), {}))
    ref = static_attack(cls)
    assert (ref.name, ref.game, ref.threat_model, ref.entry) == ("coin", "membership", frozenset({"query"}),
                                                                 "arena_coin:Coin"), "the real class's place"


@pytest.mark.parametrize("changes", [{"name": "co\x1b]0;x\x07in"}, {"name": ""}, {"threat_model": ["root"]},
                                     {"name": 3}, {"threat_model": "query"}])
def test_a_malformed_or_hostile_declaration_is_refused(changes: dict) -> None:
    with pytest.raises((TypeError, ValueError)):
        _checked_entry(declared(**changes))


def test_texts_from_the_sandbox_are_escaped_and_capped() -> None:
    assert _checked_entry({"error": "boom\x1b[2J" + "x" * 10_000})["error"].startswith("boom\\x1b[2J")
    assert len(_checked_entry({"error": "x" * 100_000})["error"]) < 5000
    errors = _checked_answer({"errors": [{"loc": ["bias\x1b", 0], "msg": "bad\r\x1b[H", "type": "x", "input": 7}]})
    assert errors == {"errors": [{"loc": ["bias\\x1b", 0], "msg": "bad\\x0d\\x1b[H", "type": "x", "input": 7}]}
    assert _checked_answer({"params": {"a": "x" * PARAMS_BYTES}})["refused"].startswith("its validated parameters")
    assert _checked_answer({"params": {"bias": 0.3}}) == {"params": {"bias": 0.3}}
    assert _checked_answer({"what": 1}) == {"refused": "no answer"}
