"""Progress reporting: counts and ETA, an updating line on a terminal, periodic plain lines elsewhere."""

from __future__ import annotations

import io

from arena.pipeline.progress import Progress, format_duration


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def row(status: str = "ok", seed: int = 0) -> dict:
    return {"track": "t", "defense_label": "dpsgd(eps=1)", "attack": "threshold-mia", "attack_label": "threshold-mia",
            "seed": seed, "status": status, "seconds": 2.5, "error": "ValueError: boom" if status == "failed" else None}


def test_format_duration() -> None:
    assert format_duration(0) == "0:00"
    assert format_duration(65.4) == "1:05"
    assert format_duration(3725) == "1:02:05"


def test_eta_is_the_mean_pace_times_what_is_left() -> None:
    clock = Clock()
    meter = Progress(4, io.StringIO(), clock=clock)
    assert meter.eta() is None  # nothing finished: no pace yet
    clock.now += 10
    meter.finished(row())
    clock.now += 10
    meter.finished(row())
    assert meter.eta() == 20.0  # 10 s per matchup, 2 left
    assert "matchups 2/4 done, 0 running, 0 failed; elapsed 0:20, eta 0:20" in meter.status()


def test_plain_output_prints_first_then_periodically_every_failure_and_the_last() -> None:
    clock, out = Clock(), io.StringIO()
    meter = Progress(5, out, interval=30, clock=clock)
    meter.started(2)
    assert out.getvalue() == ""  # no redraws when not on a terminal
    meter.finished(row(seed=1))  # first: printed
    clock.now += 5
    meter.finished(row(seed=2))  # 5 s later: quiet
    clock.now += 1
    meter.finished(row("failed", seed=3))  # a failure is always printed
    clock.now += 40
    meter.finished(row(seed=4))  # interval passed: printed
    clock.now += 1
    meter.finished(row(seed=5))  # the last: printed
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert lines[0].startswith("matchups 1/5 done, 1 running, 0 failed") and lines[0].endswith("seed 1: ok in 2.5s")
    assert lines[1] == "FAILED t dpsgd(eps=1) vs threshold-mia seed 3: ValueError: boom"
    assert lines[2].startswith("matchups 3/5 done") and "1 failed" in lines[2]
    assert lines[3].startswith("matchups 4/5 done") and lines[4].startswith("matchups 5/5 done")
    assert len(lines) == 5  # seed 2 stayed quiet


def test_terminal_output_redraws_one_line_and_ends_it() -> None:
    clock, out = Clock(), Terminal()
    meter = Progress(2, out, clock=clock)
    meter.started(2)
    assert out.getvalue() == "\rmatchups 0/2 done, 2 running, 0 failed; elapsed 0:00, eta ?"
    clock.now += 3
    meter.finished(row("failed"))
    meter.finished(row())
    text = out.getvalue()
    assert "\n" not in text.split("FAILED")[0]  # status updates overwrite one line until something must stay
    assert "\nFAILED" not in text and "FAILED t dpsgd(eps=1) vs threshold-mia seed 0: ValueError: boom\n" in text
    assert text.endswith("matchups 2/2 done, 0 running, 1 failed; elapsed 0:03, eta 0:00\n")


FORGED = "\x1b]0;pwned\x07\x1b[2J\r\u202e"


def test_an_error_and_a_label_print_escaped_and_a_newline_in_them_forges_no_line() -> None:
    """An attack's error text with a newline and control sequences, and a label made from parameters its validator
    returned (issue 40, E): every character printed is printable, and every line the failure takes after its
    first starts with the continuation prefix, so none reads as the arena's summary."""
    for stream in (io.StringIO(), Terminal()):
        meter = Progress(2, stream, clock=Clock())
        failed = {**row("failed"), "attack_label": f"evil(x={FORGED})",
                  "error": f"ValueError: {FORGED}\n2 matchups: 2 ok, 0 skipped, 0 failed\nDP audit: 0 violation(s)"}
        meter.finished(failed)
        meter.finished(row())
        text = stream.getvalue()
        assert not any(c in text for c in "\x1b\x07\u202e"), repr(text)
        assert "\\x1b]0;pwned\\x07" in text
        lines = [line for line in text.replace("\r", "\n").split("\n") if line.strip()]
        assert not [line for line in lines if line.startswith(("2 matchups", "DP audit"))], lines
        assert "  | 2 matchups: 2 ok" in text and "  | DP audit" in text
