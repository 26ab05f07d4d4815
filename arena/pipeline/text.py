"""Text on its way to a terminal or a log: what it prints is what it says.

Anything an attack made (its error, its output, its validated parameters in a label) or a file holds may carry
control sequences: ESC and OSC sequences that retitle the terminal, write its clipboard or clear the screen, a
carriage return that overwrites the line, bidirectional overrides that reorder it. ``printable`` writes every
such character as an escape (``\\x1b``, ``\\u202e``) and keeps newline and tab; ``shown`` also prefixes every
line after the first (``  | ``), so a newline in relayed text can never start a line that reads as the arena's.
"""

from __future__ import annotations

import re

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff]")
CONTINUATION = "  | "
"""What starts every line of a relayed text after its first."""


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character but newline and tab (C0, DEL, C1: ESC of ANSI and OSC sequences,
    carriage return, backspace) and every invisible or reordering one (zero-width, bidirectional overrides,
    line separators) written as an escape (``\\x1b``, ``\\u202e``): what it prints is what it says."""
    return _CONTROL.sub(_escape, text)


def shown(text: object, continuation: str = CONTINUATION) -> str:
    """``text`` (``str`` of any object) printable, each of its lines after the first starting with
    ``continuation``: one message as a terminal or a log shows it."""
    return printable(text if isinstance(text, str) else str(text)).replace("\n", "\n" + continuation)
