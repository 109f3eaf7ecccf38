"""The session's board: one small JSON record per run, in a folder every process of the session sees.

Why files: under xdist the item that reports a run lives in a worker process while the run is started
by the controller; a record per run (written atomically) lets any process wait for its own run without
a channel to the controller, and a record that says how the run ended survives the child process that
did the run. States: ``queued`` → ``running`` → one of :data:`FINAL`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from ..errors import RexmleError
from ..result import write_json_atomic

FINAL = ("done", "resumed", "skipped", "error", "interrupted")
EXECUTOR = "executor.json"
FIGURES = "campaign.json"


class ScheduleError(RexmleError):
    """The session's executor cannot give an item its run (it is gone, or never planned the run)."""


class Board:
    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    @classmethod
    def create(cls, runs_dir: Path) -> "Board":
        """A fresh board under ``<runs>/.schedule/`` (hidden from agents like the whole runs folder)."""
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
        folder = Path(runs_dir) / ".schedule" / f"{stamp}-{os.getpid()}"
        folder.mkdir(parents=True, exist_ok=True)
        return cls(folder)

    def path(self, task_id: str) -> Path:
        return self.folder / f"run-{task_id}.json"

    def write(self, task_id: str, state: str, **fields) -> None:
        write_json_atomic(self.path(task_id), {"task": task_id, "state": state,
                                               "at": datetime.now(timezone.utc).isoformat(), **fields})

    def read(self, task_id: str) -> dict | None:
        try:
            return json.loads(self.path(task_id).read_text())
        except FileNotFoundError:
            return None

    def records(self) -> list[dict]:
        out = []
        for path in sorted(self.folder.glob("run-*.json")):
            try:
                out.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue
        return out

    def announce(self, pid: int, tasks: list[str]) -> None:
        """The executor says who it is and which runs it will start (queued records first, so a waiting
        item never mistakes a run not yet written for one never planned)."""
        for task_id in tasks:
            self.write(task_id, "queued")
        write_json_atomic(self.folder / EXECUTOR, {"pid": pid, "tasks": tasks})

    def executor(self) -> dict | None:
        try:
            return json.loads((self.folder / EXECUTOR).read_text())
        except FileNotFoundError:
            return None

    def wait(self, task_id: str, poll: float = 0.1, tick: Callable[[], None] | None = None,
             executor_alive: Callable[[int], bool] | None = None) -> dict:
        """Block until ``task_id``'s record is final; ``tick`` runs between polls (progress lines)."""
        alive = executor_alive or pid_alive
        while True:
            record = self.read(task_id)
            if record is not None and record["state"] in FINAL:
                return record
            owner = self.executor()
            if owner is not None:
                if task_id not in owner["tasks"]:
                    raise ScheduleError(f"{task_id}: the session's executor did not plan this run")
                if not alive(owner["pid"]):
                    raise ScheduleError(f"{task_id}: the session's executor (pid {owner['pid']}) ended before "
                                        f"the run did")
            if tick is not None:
                tick()
            time.sleep(poll)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
