"""pytest-rexmle: the ReX-MLE medical-imaging agent benchmark as a pytest plugin.

The flow a reader should follow through the package:
task (``task.py``; ``competitions/<competition>/tasks/<id>/``) -> data (``data/``; per competition
``competitions/<competition>/synthetic.py`` and ``prepare.py``) -> runtime + agent (``runtime/``, ``agents/``)
-> submission (``submission.py``) -> grader (``competitions/<competition>/grade.py`` on ``graders/``) ->
ranking (``scoring/``) -> report (``report/``).

``__all__`` is the public API (docs/reference/api.md): what an agent, a runtime, a competition or a hook
builds on. The names are resolved on first use (PEP 562): every sandboxed agent's launcher runs this file
first and must not import the harness for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .agents.base import Agent, AgentContext
    from .errors import InvalidSubmission, RexmleError
    from .graders.base import Grader
    from .runtime.base import RunOutcome, RunSpec, Runtime
    from .scoring.result import TaskResult
    from .testing.conformance import CheckResult, run_selfcheck

__version__ = "0.1.0"

#: each public name and the module that defines it
_HOMES = {
    "Agent": "agents.base", "AgentContext": "agents.base",
    "Runtime": "runtime.base", "RunSpec": "runtime.base", "RunOutcome": "runtime.base",
    "Grader": "graders.base", "TaskResult": "scoring.result",
    "RexmleError": "errors", "InvalidSubmission": "errors",
    "run_selfcheck": "testing.conformance", "CheckResult": "testing.conformance",
}


def __getattr__(name: str) -> object:
    if name in _HOMES:
        from importlib import import_module

        value = getattr(import_module(f".{_HOMES[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["__version__", "Agent", "AgentContext", "Runtime", "RunSpec", "RunOutcome", "Grader", "TaskResult",
           "RexmleError", "InvalidSubmission", "run_selfcheck", "CheckResult"]
