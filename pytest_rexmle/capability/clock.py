"""The judge's clock: one wall-clock budget per judged run, evidence collection included.

Why: everything a judge reads was written by the agent. A pattern that is slow on some text, a folder of
5,000 files, a slow judge endpoint: whatever takes long, the session must go on to write the run's
stages, capability and report (and ``--rexmle-resume`` must not hang on the same run again). The clock
starts before the first file is opened; every step checks it (each step is bounded: a file, a record,
a line of at most ``rules.MAX_LINE_CHARS`` characters, a request with a timeout no longer than what is
left). A judge that runs out raises :class:`JudgeTimedOut`; the run's documents then say
``judge timed out`` and score nothing judged (a deterministic outcome, whatever the machine's speed).
"""

from __future__ import annotations

import math
import time

from ..errors import RexmleError

#: the flag and evidence of a run whose judge ran out of time start with this
TIMED_OUT = "judge timed out"


class JudgeTimedOut(Exception):
    """The judge's clock ran out; the message is the flag written into the run's documents."""


class Clock:
    """A deadline ``seconds`` from now; ``check(where)`` raises :class:`JudgeTimedOut` once it has passed."""

    def __init__(self, seconds: float) -> None:
        if not seconds >= 0:  # also refuses NaN
            raise ValueError(f"a judge's time limit must be a number of seconds >= 0, not {seconds!r}")
        self.seconds = float(seconds)
        self.deadline = time.monotonic() + self.seconds

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def check(self, where: str) -> None:
        if time.monotonic() >= self.deadline:
            raise JudgeTimedOut(f"{TIMED_OUT} after {self.seconds:g} s ({where}); nothing it judged counts")


def check(clock: Clock | None, where: str) -> None:
    """``clock.check(where)``, for callers whose clock is optional (tools and tests call without one)."""
    if clock is not None:
        clock.check(where)


def time_limit_seconds(value: float | str) -> float:
    """The judges' ``time_limit`` option as seconds (strings accepted, as from the command line)."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise RexmleError(f"judge option time_limit must be a number of seconds, not {value!r}") from None
    if not (math.isfinite(seconds) and seconds >= 0):
        raise RexmleError(f"judge option time_limit must be a finite number of seconds >= 0, not {value!r}")
    return seconds
