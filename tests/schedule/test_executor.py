"""The executor's bookkeeping without starting a run: its queue's order and the counts it writes."""

from __future__ import annotations

from pathlib import Path

from pytest_rexmle.schedule.board import Board, run_key
from pytest_rexmle.schedule.executor import Executor
from pytest_rexmle.schedule.policy import start_order
from pytest_rexmle.settings import Settings


def settings(tmp_path: Path, **fields) -> Settings:
    return Settings(agent="command", agent_options={}, data="synthetic", data_dir=tmp_path / "data", runtime="local",
                    time_limit=None, runs_dir=tmp_path / "runs", report_dir=tmp_path / "report", min_percentile=0.0,
                    resume=False, unsafe_local=False, seed=0, **fields)


def test_the_queue_is_in_start_order_and_its_counts_follow_the_runs(tmp_path):
    """The queue is kept in start order (a start takes its run from the head, no sort per start), and the
    progress line's counts are kept as runs move, not counted over every run at each change."""
    keys = [run_key(f"t.py::test[{task}-{i}]", task) for i in range(3) for task in ("ldct-iqa", "isles22")]
    board = Board.create(tmp_path / "runs")
    executor = Executor(settings(tmp_path, gpus=("0", "1")), board, keys, batches=False)
    assert [p.run for p in executor.queue] == [p.run for p in sorted(executor.queue, key=start_order)] == keys
    assert executor._status() == {"queued": 6, "running": 0, "finished": 0}
    executor._note(0.0)
    assert board.status() == {"queued": 6, "running": 0, "finished": 0} and executor.timeline[-1] == (0.0, 2, 1)
    executor._ended(keys[0], 1.0)
    executor._ended(keys[0], 2.0)  # a run ends once, whoever says so last
    assert executor._status()["finished"] == 1
    assert executor.cancel("-x: the first failure") == keys
    executor._note(3.0)
    assert executor.timeline[-1] == (3.0, 2, None)
    assert board.status() == {"queued": 0, "running": 0, "finished": 1}
    assert {board.read(k).state for k in keys} == {"skipped"}


def test_a_schedulers_runs_are_submitted_in_collection_order(tmp_path):
    keys = [run_key(f"t.py::test[{task}]", task) for task in ("seg-a", "ldct-iqa", "isles22")]
    executor = Executor(settings(tmp_path), Board.create(tmp_path / "runs"), keys, batches=True)
    assert [p.run for p in executor.queue] == keys
    assert executor._status() == {"queued": 3, "running": 0, "finished": 0, "scheduler": {}, "ended": 0, "polls": 0}
