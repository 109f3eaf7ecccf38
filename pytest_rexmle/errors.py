"""Exception types that carry the benchmark's outcome categories.

Keeping agent faults (an invalid submission) apart from harness faults (a broken task file, a grader
bug) is what lets a report say "the agent failed" versus "we failed".
"""

from __future__ import annotations


class RexmleError(Exception):
    """Base class for errors the harness reports with a clear message instead of a traceback."""


class TaskConfigError(RexmleError):
    """A task folder is malformed; the message names the file and the field."""


class UnknownTaskError(RexmleError):
    """A task id or alias that no task folder declares."""


class InvalidSubmission(RexmleError):
    """The agent's submission breaks a format rule; graded as FAIL with this reason."""


class DataNotPreparedError(RexmleError):
    """The task's data is not on disk; the message carries the command that prepares it."""

    def __init__(self, message: str, command: str) -> None:
        super().__init__(message)
        self.command = command


class RankingError(RexmleError):
    """Metrics handed to the ranker do not fit the task's leaderboard."""


__all__ = ["RexmleError", "TaskConfigError", "UnknownTaskError", "InvalidSubmission", "DataNotPreparedError",
           "RankingError"]
