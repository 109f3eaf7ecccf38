"""Hooks pytest-rexmle adds to pytest (registered with ``pluginmanager.add_hookspecs``).

Implement them in a ``conftest.py`` or a plugin, with the same argument names (pluggy passes them by
keyword, so any subset of them may be taken). Both are plain notifications: every implementation runs
and what it returns is ignored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .scoring.result import TaskResult

__all__ = ["pytest_rexmle_result", "pytest_rexmle_session_report"]


@pytest.hookspec()
def pytest_rexmle_result(result: TaskResult, item: pytest.Item) -> None:
    """Called on the process that ran ``item`` once its task's result is final (graded or FAIL).

    Use it to ship results elsewhere; the session report is built on the controller from test reports
    and stays correct under xdist.

    :param result: the task's final result, as ``result.json`` records it.
    :param item: the benchmark item that waited for the run (its ``user_properties`` reach the JUnit XML).
    """


@pytest.hookspec()
def pytest_rexmle_session_report(report: dict[str, Any], config: pytest.Config) -> None:
    """Called on the controller with the final session report before it is written to disk.

    :param report: the document ``rexmle-report.json`` will hold (see the documents reference).
    :param config: the session's pytest config.
    """
