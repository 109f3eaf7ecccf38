"""A test suite's time-out never cuts a benchmark run (issue: every real run died after 15 minutes).

pyproject.toml sets pytest-timeout's ``timeout`` for the project's tests; a benchmark item run from the
checkout inherits it. The items that wait for a run carry ``timeout(0)``, and the run is bounded where it runs:
the runtime stops the agent at its time limit, the waiting item at the limit plus the harness's margin.
"""

from __future__ import annotations

import time

import pytest

from pytest_rexmle.schedule.board import RUN_MARGIN_SECONDS, Board, ScheduleError, run_deadline

from .conftest import report_json

#: an agent that outlives the test-suite time-out given on the command line, then submits the sample file
SLEEPER = "sleep 10 && cp $REXMLE_DATA_DIR/sample_submission.csv $REXMLE_SUBMISSION_DIR/submission.csv"


@pytest.mark.slow  # a sandboxed run that sleeps 10 s
@pytest.mark.parametrize("suite_timeout", [("-o", "timeout=5"), ("--timeout=5",)], ids=["ini", "option"])
def test_an_agent_outlives_the_suite_timeout_and_is_graded(bench, needs_bwrap, suite_timeout):
    result = bench(*suite_timeout, "--agent=command", f"--agent-option=cmd={SLEEPER}", "--rexmle-time-limit=60",
                   "-k", "ldct-iqa")
    result.assert_outcomes(passed=1)
    assert "Timeout" not in result.stdout.str()
    row = report_json(bench.path)["tasks"][0]
    assert row["status"] == "ok" and row["timings"]["agent_seconds"] >= 10


def test_a_users_own_check_on_the_result_waits_past_the_suite_timeout(pytester):
    """The user's own tests that request a run's fixtures get the same marker as the benchmark item."""
    pytester.makepyfile("def test_mine(rexmle_agent_run):\n    pass\n\ndef test_plain():\n    pass\n")
    items, _ = pytester.inline_genitems("-p", "no:cacheprovider")
    mine = [item.get_closest_marker("timeout") for item in items if item.originalname == "test_mine"]
    assert len(mine) == 20 and all(marker is not None and marker.args == (0,) for marker in mine)
    assert [item.get_closest_marker("timeout") for item in items if item.name == "test_plain"] == [None]


def test_a_run_past_its_deadline_ends_the_wait_with_an_error(tmp_path):
    board = Board(tmp_path)
    board.announce(0, [])  # no executor to outlive: the deadline alone decides
    (tmp_path / "executor.json").unlink()
    board.write("ldct-iqa@abc", "running", pid=1, time_limit=60.0, run_dir="/runs/x", deadline=time.time() - 1)
    with pytest.raises(ScheduleError, match=r"ldct-iqa: its run's harness \(pid 1\) did not end the run within its "
                                            r"time limit \(60 s\)"):
        board.wait("ldct-iqa@abc", poll=0.01)


def test_a_run_within_its_deadline_or_without_one_is_waited_for(tmp_path):
    board = Board(tmp_path)
    polls = []

    def finish_after_three() -> None:
        polls.append(1)
        if len(polls) == 3:
            board.write("a@1", "done", run_dir="/runs/a", time_limit=60.0, outcome={})
            board.write("b@1", "done", run_dir="/runs/b", time_limit=60.0, outcome={})

    board.write("a@1", "running", pid=1, time_limit=60.0, run_dir="/runs/a", deadline=time.time() + 60)
    board.write("b@1", "running", pid=1, time_limit=60.0, run_dir="/runs/b", deadline=None)  # a batch job
    assert board.wait("a@1", poll=0.01, tick=finish_after_three).state == "done"
    assert board.wait("b@1", poll=0.01).state == "done"


def test_the_deadline_is_the_limit_plus_the_margin():
    assert run_deadline(1000.0, 86400.0) == 1000.0 + 86400.0 + RUN_MARGIN_SECONDS + 8640.0
    assert RUN_MARGIN_SECONDS >= 600  # large workspaces are copied back after the limit
