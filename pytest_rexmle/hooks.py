"""Hooks pytest-rexmle adds to pytest (registered with ``pluginmanager.add_hookspecs``)."""

from __future__ import annotations


def pytest_rexmle_result(result, item) -> None:
    """Called on the process that ran ``item`` once its challenge result is final (graded or FAIL).

    ``result`` is a :class:`pytest_rexmle.result.TaskResult`. Use it to ship results elsewhere;
    the session report is built on the controller from test reports and stays correct under xdist.
    """


def pytest_rexmle_session_report(report, config) -> None:
    """Called on the controller with the final session report dict before it is written to disk."""
