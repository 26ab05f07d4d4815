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
