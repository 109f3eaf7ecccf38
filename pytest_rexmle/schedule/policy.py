"""Which queued runs start now, and on which slots.

Slots are the session's GPUs (one id each), or anonymous CPU slots with ``--rexmle-gpus=none``. A run
takes ``width`` slots (its task's ``gpus:``; one in CPU mode). Order: longest expected run first (the
budget from ``task.yaml``, or ``--rexmle-time-limit``), then collection order, so the long runs never
end up last on an otherwise idle machine.

A run that needs more slots than are free reserves them (EASY backfilling): its start time is the
moment enough running runs are sure to have ended (their budgets are upper bounds, the runtime kills at
the limit), and a run behind it may still start now when it is sure to end before then, or when it
fits in the slots the reserved run will not need. The wide run is never starved and the narrow ones
are held back only until it has started.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Pending:
    """A run waiting for slots."""

    run: str          # the run's key on the board (one per pytest item that asks for a run)
    width: int        # slots it needs (GPUs; 1 CPU slot)
    expected: float   # seconds: its budget, an upper bound on how long it holds its slots
    order: int        # collection order, the tie-breaker


@dataclass(frozen=True)
class Active:
    """A run holding slots."""

    run: str
    slots: tuple[str, ...]
    started: float
    expected: float


def start_order(run: Pending) -> tuple[float, int]:
    """Longest expected first, then collection order."""
    return -run.expected, run.order


def choose(queue: Iterable[Pending], free: list[str], active: list[Active], now: float,
           max_active: int | None = None, ordered: bool = False) -> list[tuple[Pending, tuple[str, ...]]]:
    """The runs to start now with the slots each gets, in the order they should start: longest expected
    first, then collection order (``ordered``: the queue is in that order already, as the executor keeps it).
    It stops reading the queue once no slot is left: a start costs the runs it looks at, not the queue's length."""
    free = list(free)
    running = list(active)
    starts: list[tuple[Pending, tuple[str, ...]]] = []
    shadow: float | None = None   # when the first blocked run is sure to fit
    spare = 0                     # slots the blocked run will not need at its shadow time
    for run in queue if ordered else sorted(queue, key=start_order):
        if not free or (max_active is not None and len(running) >= max_active):
            break
        if run.width > len(free):
            if shadow is None:
                shadow, spare = reservation(run.width, len(free), running, now)
            continue
        if shadow is not None:
            ends_in_time = now + run.expected <= shadow
            if not ends_in_time and run.width > spare:
                continue
            if not ends_in_time:
                spare -= run.width
        taken, free = tuple(free[:run.width]), free[run.width:]
        starts.append((run, taken))
        running.append(Active(run.run, taken, now, run.expected))
    return starts


def reservation(width: int, free: int, running: list[Active], now: float) -> tuple[float, int]:
    """(time at which ``width`` slots are sure to be free, slots beyond ``width`` free at that time)."""
    available = free
    for run in sorted(running, key=lambda a: a.started + a.expected):
        available += len(run.slots)
        if available >= width:
            return max(now, run.started + run.expected), available - width
    return float("inf"), 0  # cannot happen for a width the session has; nothing is held back for it
