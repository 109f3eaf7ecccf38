"""Tools for those who build on the harness: the runtime conformance suite.

A runtime provider (a package declaring a ``rexmle.runtimes`` entry point) checks that it keeps the
harness's promises with ``rexmle selfcheck --runtime NAME``, or from its own tests::

    from pytest_rexmle.testing import run_selfcheck
    results = run_selfcheck(MyRuntime())
    assert all(r.passed for r in results), [r.line() for r in results]

Each :class:`CheckResult` names one attack class of :data:`CHECKS`; what each one checks is listed in
docs/security/index.md ("Checking a runtime").
"""

from __future__ import annotations

from .conformance import CHECKS, CheckResult, run_selfcheck

__all__ = ["CHECKS", "CheckResult", "run_selfcheck"]
