"""The board: run records in files, and what an item waiting on one is told."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time

import pytest
from pydantic import ValidationError

from pytest_rexmle.schedule.board import Board, Done, Failed, ScheduleError, run_key, task_of_key


def test_keys_name_the_task_and_differ_per_item():
    a, b = run_key("bench.py::test_task[isles22]", "isles22"), run_key("t.py::test_repeat[isles22-1]", "isles22")
    assert a != b and task_of_key(a) == task_of_key(b) == "isles22"


def test_an_item_waits_until_its_run_is_final(tmp_path):
    board = Board.create(tmp_path / "runs")
    assert stat.S_IMODE(board.folder.stat().st_mode) == 0o700  # it holds the pickled settings
    key = run_key("x::test_task[ldct-iqa]", "ldct-iqa")
    board.announce(os.getpid(), [key])
    ticks = []

    def finish_later() -> None:
        time.sleep(0.3)
        board.write(key, "running", run_dir="/r", pid=os.getpid(), time_limit=60.0)
        time.sleep(0.3)
        board.write(key, "done", run_dir="/r", time_limit=60.0, outcome={"exit_code": 0})

    threading.Thread(target=finish_later).start()
    record = board.wait(key, poll=0.02, tick=lambda: ticks.append(1))
    assert isinstance(record, Done) and record.task == "ldct-iqa" and record.outcome == {"exit_code": 0}
    assert len(ticks) >= 10  # it polled (and ticked) while the run was queued and running


def test_an_item_is_told_when_the_executor_is_gone_or_never_planned_its_run(tmp_path):
    board = Board.create(tmp_path / "runs")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    planned, other = run_key("a[isles22]", "isles22"), run_key("b[dentex]", "dentex")
    board.announce(dead.pid, [planned])
    with pytest.raises(ScheduleError, match=f"executor \\(pid {dead.pid}\\) ended before the run did"):
        board.wait(planned, poll=0.01)
    with pytest.raises(ScheduleError, match="dentex: the session's executor did not plan this run"):
        board.wait(other, poll=0.01)


def test_the_plan_is_parsed_again_only_when_it_changes(tmp_path):
    """An item's wait polls executor.json, which lists every run: it is parsed once per version of the file,
    and a rewritten plan is read at the next poll."""
    board = Board.create(tmp_path / "runs")
    first, later = run_key("a[isles22]", "isles22"), run_key("b[dentex]", "dentex")
    board.announce(os.getpid(), [first])
    plan = board.executor()
    assert plan is not None and plan["runs"] == [first] and board.executor() is plan
    board.announce(os.getpid(), [first, later], {later: {"repeat": 2}})
    assert board.executor()["runs"] == [first, later] and board.identity(later) == {"repeat": 2}
    board.write(later, "done", run_dir="/r", time_limit=60.0, outcome={})
    assert board.wait(later, poll=0.01).run_dir == "/r"


def test_a_runs_folder_that_cannot_hold_the_board_leaves_the_error_to_the_runs(tmp_path):
    blocker = tmp_path / "runs-is-a-file"
    blocker.write_text("")
    board = Board.create(blocker)
    assert board.folder.is_dir() and not str(board.folder).startswith(str(blocker))
    assert stat.S_IMODE(board.folder.stat().st_mode) == 0o700


def test_each_state_is_a_typed_record_checked_when_written(tmp_path):
    """A writer that forgets a state's field or misspells one fails where it writes, not in the item that reads
    the record later; what is read back is the state's own record, the JSON on disk what was written."""
    board = Board.create(tmp_path / "runs")
    key = run_key("x::test_task[dentex]", "dentex")
    with pytest.raises(ValidationError, match="reason"):
        board.write(key, "skipped")
    with pytest.raises(ValidationError, match="run_dri"):
        board.write(key, "done", run_dri="/r", time_limit=1.0, outcome={})
    with pytest.raises(ValidationError):
        board.write(key, "finished", reason="no such state")
    assert board.read(key) is None  # nothing half-written
    board.write(key, "error", message="RexmleError: no GPU", usage_error=True, warnings=["w"])
    record = board.read(key)
    assert isinstance(record, Failed) and record.usage_error and record.traceback == "" and record.warnings == ["w"]
    on_disk = json.loads(board.path(key).read_text())
    assert on_disk["state"] == "error" and on_disk["run"] == key and on_disk["task"] == "dentex"
    assert [type(r).__name__ for r in board.records()] == ["Failed"]
