"""The session's board: one small JSON record per run, in a folder every process of the session sees.

Why files: under xdist the item that reports a run lives in a worker process while the run is started
by the controller; a record per run (written atomically) lets any process wait for its own run without
a channel to the controller, and a record that says how the run ended survives the child process that
did the run. States: ``queued`` → ``starting`` → ``running`` (or ``submitted``: a batch job the session's
watcher follows) → one of :data:`FINAL` (done, resumed, skipped, error, interrupted). Each state is a typed record (:data:`BoardRecord`), checked when it is
written, so a field a writer misspells or forgets fails in the writer, not in the item that reads it later.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from ..errors import RexmleError
from ..jsonfile import write_json_atomic
from ..runtime.liveness import pid_alive

EXECUTOR = "executor.json"
#: the executor's counts (queued, running, finished; a scheduler's states), rewritten at each change: the
#: progress line reads this one file, never every run's record
STATUS = "status.json"
#: a batch runtime's session: a counter the executor bumps every few seconds; its jobs stop themselves when it
#: stands still (runtime/slurm_job.watch_session), since no process of the session waits for a queued job
HEARTBEAT = "heartbeat"
FIGURES = "campaign.json"


#: on the board while the session stops because it got SIGTERM: each run's harness reads it, so its
#: record says what really stopped it (``rexmle status``: "SIGTERM", not "Ctrl-C")
STOP_REASON = "stop-reason"
#: on the board once pytest decided to stop (``-x``, ``--maxfail``, ``--sw``): why, and when (no run starts after)
STOPPED = "stopped.json"

#: how long past its time limit a run's harness may take to stop the agent, copy its folders back and say
#: "done" before a waiting item gives up on it (an ERROR, never a cut of a healthy run): generous, since a
#: 24-hour run's workspace can be large; a tenth of the limit more for long runs
RUN_MARGIN_SECONDS = 900.0

#: how the benchmark's own item's name begins: ``test_task[``, or ``test_challenge[``, its name before. Its resume key
#: holds no name (:func:`item_identity`), so a campaign started under the old name resumes; an id of the old name
#: is still read as the benchmark's item, never as an item of your own (whose key would hold its id)
BENCHMARK_ITEM = ("test_task[", "test_challenge[")


class _OnBoard(BaseModel):
    """What every record says: the run (its board key), its task, and when (UTC) it entered its state."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    run: str
    task: str
    at: str


class _Warned(_OnBoard):
    #: the warnings the run's harness caught: the item that reports the run warns with them in its own session
    warnings: list[str] = []


class Queued(_OnBoard):
    state: Literal["queued"]


class Starting(_OnBoard):
    state: Literal["starting"]
    gpus: list[str]


class Running(_OnBoard):
    state: Literal["running"]
    run_dir: str
    gpus: list[str] = []
    pid: int
    time_limit: float
    #: :func:`run_deadline`; None where a scheduler's queue comes first (it enforces the limit itself)
    deadline: float | None = None


class Submitted(_Warned):
    """A batch job handed to the session's watcher: no process waits for it until it ends."""

    state: Literal["submitted"]
    run_dir: str
    job_id: str
    gpus: list[str] = []
    time_limit: float
    run_key: dict[str, Any] | None = None


class Done(_Warned):
    state: Literal["done"]
    run_dir: str
    gpus: list[str] = []
    time_limit: float
    outcome: dict[str, Any]
    telemetry: dict[str, Any] | None = None
    #: the resume key as the run's harness computed it: what the run's seal binds
    run_key: dict[str, Any] | None = None


class Resumed(_Warned):
    """An earlier run's result, as its seal verified it."""

    state: Literal["resumed"]
    run_dir: str
    time_limit: float
    result: dict[str, Any]


class Skipped(_Warned):
    state: Literal["skipped"]
    reason: str


class Failed(_Warned):
    """A harness fault (an ERROR, kept apart from the agent's FAILs); ``usage_error``: the session stops with it."""

    state: Literal["error"]
    message: str
    traceback: str = ""
    usage_error: bool = False


class Interrupted(_Warned):
    state: Literal["interrupted"]
    reason: str


#: the records that say how a run ended: nothing changes them after
FINAL = (Done, Resumed, Skipped, Failed, Interrupted)
Final = Done | Resumed | Skipped | Failed | Interrupted
#: one run's record, by its state
BoardRecord = Annotated[Queued | Starting | Running | Submitted | Done | Resumed | Skipped | Failed | Interrupted,
                        Field(discriminator="state")]
_RECORD: TypeAdapter[BoardRecord] = TypeAdapter(BoardRecord)


def run_deadline(started: float, time_limit: float) -> float:
    """The wall-clock moment after which a run still "running" has a stuck harness (:meth:`Board.wait`)."""
    return started + time_limit + RUN_MARGIN_SECONDS + 0.1 * time_limit


def run_key(nodeid: str, task_id: str, agent: str | None = None) -> str:
    """The board's name for the run of one pytest item: one run per item that asks for one, as before
    (repeats of a task in a test module each get their own run). With several ``--agent`` the
    item's agent is part of the name, so the run's harness starts that agent."""
    key = f"{task_id}@{hashlib.sha1(nodeid.encode()).hexdigest()[:10]}"
    return f"{key}@{agent}" if agent else key


def item_identity(nodeid: str, repeat: int | None = None, benchmark: bool | None = None) -> dict:
    """The item's part of its run's resume key (:func:`pytest_rexmle.run.launch.run_key`): ``repeat`` beyond the
    first, and for an item of a test module of your own (which may repeat a task by parametrizing its
    test) the item's id as ``<file name>::<test>[<params>]``, independent of the folder pytest runs from.
    The benchmark's own item (``benchmark``; guessed from the id where not given) is said in full by its
    task, agent and repeat, so its key stays what it was without repeats and older runs stay resumable."""
    identity: dict = {"repeat": repeat} if repeat is not None and repeat > 1 else {}
    path, _, name = nodeid.partition("::")
    if benchmark is None:
        benchmark = Path(path).name in ("", "benchmark.py") and name.startswith(BENCHMARK_ITEM)
    if not benchmark:
        identity["item"] = f"{Path(path).name}::{name}"
    return identity


def task_of_key(key: str) -> str:
    return key.split("@", 1)[0]


def agent_of_key(key: str) -> str | None:
    """The agent a key names (several agents in the session), else None: the session's only agent."""
    parts = key.split("@")
    return parts[2] if len(parts) > 2 else None


class ScheduleError(RexmleError):
    """The session's executor cannot give an item its run (it is gone, or never planned the run)."""


class Board:
    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._plan: tuple[tuple[int, int, int], dict, frozenset[str]] | None = None

    @classmethod
    def create(cls, runs_dir: Path) -> Board:
        """A fresh board under ``<runs>/.schedule/`` (hidden from agents like the whole runs folder), mode
        0700 (it holds the session's settings). Where the runs folder cannot hold it (not a folder, read-only)
        a private temporary folder does, so that each item still meets the real error with its own run."""
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        folder = Path(runs_dir) / ".schedule" / f"{stamp}-{os.getpid()}"
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError:
            folder = Path(tempfile.mkdtemp(prefix=f"rexmle-schedule-{stamp}-"))
        return cls(folder)

    def path(self, key: str) -> Path:
        return self.folder / f"run-{key}.json"

    def write(self, key: str, state: str, durable: bool = True, **fields: Any) -> BoardRecord:
        """Record run ``key``'s new ``state`` with its fields, checked against that state's record."""
        record = _RECORD.validate_python({"run": key, "task": task_of_key(key), "state": state,
                                          "at": datetime.now(UTC).isoformat(), **fields})
        write_json_atomic(self.path(key), record.model_dump(mode="json"), durable=durable)
        return record

    def read(self, key: str) -> BoardRecord | None:
        """Run ``key``'s record; None while it is not written yet."""
        try:
            return _RECORD.validate_json(self.path(key).read_bytes())
        except FileNotFoundError:
            return None

    def records(self) -> list[BoardRecord]:
        out = []
        for path in sorted(self.folder.glob("run-*.json")):
            try:
                out.append(_RECORD.validate_json(path.read_bytes()))
            except (OSError, ValueError):
                continue
        return out

    def announce(self, pid: int, runs: list[str], identities: dict[str, dict] | None = None) -> None:
        """The executor says who it is and which runs it will start (queued records first, so a waiting
        item never mistakes a run not yet written for one never planned), with each run's item identity
        (:func:`item_identity`), which the run's harness puts into its resume key."""
        for key in runs:  # not fsynced: executor.json (which is) lists the plan too (1,000 runs: 0.76 s → 0.31 s here)
            self.write(key, "queued", durable=False)
        write_json_atomic(self.folder / EXECUTOR, {"pid": pid, "runs": runs, "identities": identities or {}})

    def identity(self, key: str) -> dict:
        """The identity the executor announced for run ``key`` ({} for none: a plain benchmark item)."""
        return dict(((self.executor() or {}).get("identities") or {}).get(key) or {})

    def note_stop(self, reason: str) -> None:
        """pytest decided to stop the session: why and when (UTC), for ``rexmle status`` and the tests."""
        write_json_atomic(self.folder / STOPPED, {"reason": reason, "at": datetime.now(UTC).isoformat()})

    def stopped(self) -> dict | None:
        return _load(self.folder / STOPPED)

    def beat(self, count: int) -> None:
        write_json_atomic(self.folder / HEARTBEAT, {"beat": count, "pid": os.getpid()})

    def write_status(self, status: dict) -> None:
        write_json_atomic(self.folder / STATUS, status, durable=False)  # a progress line's counts, rewritten often

    def status(self) -> dict | None:
        return _load(self.folder / STATUS)

    def executor(self) -> dict | None:
        """Parsed again only when it changed (its inode, time, size): a waiting item polls it ten times a second
        and it lists every run (a parse per poll made a session's waits cost N² in all)."""
        path = self.folder / EXECUTOR
        try:
            stat = path.stat()
        except FileNotFoundError:
            return None
        sign = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if self._plan is None or self._plan[0] != sign:
            doc = _load(path)
            if doc is None:
                return None
            self._plan = (sign, doc, frozenset(doc.get("runs") or ()))
        return self._plan[1]

    def wait(self, key: str, poll: float = 0.1, tick: Callable[[], None] | None = None) -> Final:
        """Block until run ``key``'s record is final; ``tick`` runs between polls (progress lines).

        No time-out while the run is queued (the session owns the schedule); once it runs, its record's
        ``deadline`` (:func:`run_deadline`, absent where a scheduler's queue comes first) bounds the wait."""
        while True:
            record = self.read(key)
            if isinstance(record, FINAL):
                return record
            if isinstance(record, Running) and time.time() > (record.deadline or 1e300):
                raise ScheduleError(f"{task_of_key(key)}: its run's harness (pid {record.pid}) did not end the "
                                    f"run within its time limit ({record.time_limit:.0f} s) and the harness's "
                                    f"margin; the run's folder: {record.run_dir}")
            owner = self.executor()
            if owner is not None and self._plan is not None:
                if key not in self._plan[2]:
                    raise ScheduleError(f"{task_of_key(key)}: the session's executor did not plan this run")
                if not pid_alive(owner["pid"], None):
                    raise ScheduleError(f"{task_of_key(key)}: the session's executor (pid {owner['pid']}) ended before "
                                        f"the run did")
            if tick is not None:
                tick()
            time.sleep(poll)


def _load(path: Path) -> dict | None:
    """A record of the board; None while it is not written yet."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
