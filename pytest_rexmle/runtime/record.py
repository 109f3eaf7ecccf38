"""``run.json``'s typed model: the run's launcher writes it, and a batch runtime adds to it (a resubmitted job).

Its own module (not :mod:`.base`) so that the local runtime, which the node probe and every run import, does not
load pydantic and the file readers for it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..agent_output import read_bytes
from ..documents import Document, parse

#: run.json is a few kB; a larger one is not parsed
MAX_RECORD_BYTES = 4 * 1024 * 1024
RUN_JSON = "run.json"


class RunRecord(Document):
    """``run.json``: how a run was started and, once ``finished`` is set, how it ended.

    It grows while the run goes on (the runtime's handle record, the gateway's usage and egress, the
    scrub report, GPU telemetry, ``interrupted``/``interrupted_by`` when the session was stopped,
    ``reattached`` when a later one took the run over), so every key but the start's is optional and
    only keys that were set are written; keys of other parts of the harness are kept as they are.
    """

    task: str
    agent: str
    runtime: str
    data: str
    time_limit: float
    started: str
    runtime_reason: str | None = None  # set where the session chose the runtime (no --rexmle-runtime)
    agent_options: dict[str, Any] = {}
    key: dict[str, Any] | None = None
    owner: dict[str, Any] | None = None
    gpus: list[str] = []
    finished: str | None = None
    exit_code: int | None = None
    timed_out: bool | None = None
    duration: float | None = None
    #: the item's repeat (``--rexmle-repeat``, 1 without) and, for an item of a test module of your own,
    #: its id: part of ``key`` too, so that each item resumes only its own run
    repeat: int | None = None
    repeats: int | None = None
    item: str | None = None

    @classmethod
    def read(cls, path: Path) -> RunRecord:
        """Bounded read (the run folder is the agent's too); a bad file names the file and the field."""
        return parse(cls, json.loads(read_bytes(path, MAX_RECORD_BYTES)), path)


def write_run_record(path: Path, meta: dict) -> None:
    """Checked against :class:`RunRecord` before it replaces the file, then written as given."""
    parse(RunRecord, meta, path).write(path)

