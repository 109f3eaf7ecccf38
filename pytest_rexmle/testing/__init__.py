"""Tools for those who build on the harness: the runtime conformance suite.

A runtime provider (a package declaring a ``rexmle.runtimes`` entry point) checks that it keeps the
harness's promises with ``rexmle selfcheck --runtime NAME``, or from its own tests::

    from pytest_rexmle.testing import run_selfcheck
    results = run_selfcheck(MyRuntime())
    assert all(r.passed for r in results), [r.line() for r in results]

Each :class:`CheckResult` names one attack class of :data:`CHECKS`: ``answers`` (the private answers and
a hidden path unreadable), ``writes`` (nothing written outside the workspace and submission),
``leftovers`` (no process or temporary file outlives the run), ``keys`` (the host's provider key in no
environment, process or file the agent reads), ``network`` (the session's gateway answers and is the
only peer), ``limits`` (a process count and a memory limit hold) and ``interpreter`` (an image whose
``python3`` is hostile still runs as the run's uid with no capability and the run's limits; for runtimes
that run images from this machine's image cache, else not applicable).
"""

from __future__ import annotations

from .conformance import CHECKS, CheckResult, run_selfcheck

__all__ = ["CHECKS", "CheckResult", "run_selfcheck"]
