"""Header differences that do not stop grading, collected for the result and for ``rexmle validate``.

A prediction whose voxel grid has the ground truth's shape but whose header
says another spacing, origin or direction is scored on the ground truth's grid, as every organiser's
evaluation does. The difference is still worth telling: the agent's header is unusual (a 0.5 mm shift is
what nibabel gives on an image whose qform and sform disagree). Readers deep inside a grader record such
notes here; the caller that grades or validates collects them around the call::

    with collecting() as notes:
        grader.grade(submission, answers)
    result.warnings = notes.messages()

A context variable carries the collector, so graders need no new parameter; :func:`..metrics.parallel.
parallel_map` runs its threads in a copy of the caller's context, and the copies share the one collector.
Outside :func:`collecting`, :func:`record` does nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

#: notes kept in full; beyond this a result would be dominated by one repeated problem
MAX_NOTES = 20


class HeaderNotes:
    """The distinct notes of one grading or validation, in the order they were first recorded."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._notes: list[str] = []
        self._seen: set[str] = set()
        self._dropped = 0

    def add(self, message: str) -> None:
        with self._lock:
            if message in self._seen:
                return
            self._seen.add(message)
            if len(self._notes) < MAX_NOTES:
                self._notes.append(message)
            else:
                self._dropped += 1

    def messages(self) -> list[str]:
        with self._lock:
            tail = [f"... and {self._dropped} more header difference(s) of the same kind"] if self._dropped else []
            return [*self._notes, *tail]


_current: ContextVar[HeaderNotes | None] = ContextVar("rexmle_header_notes", default=None)


@contextmanager
def collecting() -> Iterator[HeaderNotes]:
    """Collect the notes recorded while the block runs (nested blocks collect their own)."""
    notes = HeaderNotes()
    token = _current.set(notes)
    try:
        yield notes
    finally:
        _current.reset(token)


def record(message: str) -> None:
    notes = _current.get()
    if notes is not None:
        notes.add(message)
