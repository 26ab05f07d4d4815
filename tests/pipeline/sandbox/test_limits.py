"""arena.pipeline.sandbox.limits: the limits read from the environment, and text from an attack made printable."""

from __future__ import annotations

import pytest

from arena.pipeline.sandbox import Limits, clip_text, printable


def test_limits_come_from_the_environment_with_suffixes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ARENA_SANDBOX_UID_BASE", raising=False)  # the suite's workers set their own
    assert Limits.from_env() == Limits()
    monkeypatch.setenv("ARENA_SANDBOX_MESSAGE_BYTES", "2M")
    monkeypatch.setenv("ARENA_SANDBOX_QUERY_ROWS", "1000")
    monkeypatch.setenv("ARENA_SANDBOX_UID_BASE", "0x10000")
    monkeypatch.setenv("ARENA_SANDBOX_MEMORY", "1GiB")
    limits = Limits.from_env()
    assert (limits.message_bytes, limits.query_rows, limits.uid_base, limits.memory) == (2 << 20, 1000, 65536, 1 << 30)
    monkeypatch.setenv("ARENA_SANDBOX_NPROC", "many")
    with pytest.raises(ValueError, match="ARENA_SANDBOX_NPROC='many': not a number"):
        Limits.from_env()


def test_control_and_invisible_characters_are_escaped_newlines_and_tabs_kept() -> None:
    assert printable("a\x1b]0;title\x07b\r\x08\x9b\u202e\u200b\n\tc") == \
        "a\\x1b]0;title\\x07b\\x0d\\x08\\x9b\\u202e\\u200b\n\tc"
    assert printable("plain text, é, 数") == "plain text, é, 数"


def test_clipped_text_says_how_much_was_left_out() -> None:
    assert clip_text("short", 10) == "short"
    assert clip_text("x" * 25, 10) == "xxxxxxxxxx [15 more characters not shown]"
    assert clip_text("x" * 20 + "END", 10, tail=True) == "[13 more characters not shown]\nxxxxxxxEND"
    escaped = clip_text("\x1b" * 10, 12)
    assert escaped.startswith("\\x1b\\x1b\\x1b") and "not shown" in escaped and "\x1b" not in escaped
