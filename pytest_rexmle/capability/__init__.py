"""Capability analysis: which of the 13 winning strategies an agent run shows (docs/reference/documents.md).

Entry points (wired into the plugin and the CLI by the harness):

* :func:`get_judge` — ``"rules"`` (offline, deterministic, the default) or ``"llm"`` (any
  OpenAI-compatible chat-completions endpoint); both implement :class:`Judge`.
* ``Judge.judge_run(run_dir, task) -> dict`` — writes and returns ``<run_dir>/capability.json``.
* :func:`aggregate` — per-agent means over runs; :func:`session_document` — the session's
  ``rexmle-capability.json``.
* :class:`CapabilityRun`, :class:`AgentCapability`, :class:`SessionCapability` — the documents' models
  (``Model.check(doc)`` validates a parsed document).

The document schemas are in :mod:`pytest_rexmle.capability.schema`.
"""

from __future__ import annotations

from ..errors import RexmleError
from .base import CAPABILITY_JSON, JUDGED_STAGES, Judge
from .schema import AgentCapability, CapabilityRun, SessionCapability, aggregate, session_document
from .strategies import Strategy, load_strategies

JUDGES = ("rules", "llm")
DEFAULT_JUDGE = "rules"
SESSION_CAPABILITY_JSON = "rexmle-capability.json"


def get_judge(name: str = DEFAULT_JUDGE, **options) -> Judge:
    """A judge by name; options are the judge's keyword options (strings accepted, see each module)."""
    if name == "rules":
        from .rules import RulesJudge  # capability imports this module at its top

        return RulesJudge(**options)
    if name == "llm":
        from .llm import LLMJudge  # capability imports this module at its top

        return LLMJudge(**options)
    raise RexmleError(f"unknown capability judge {name!r}; known: {', '.join(JUDGES)}")


__all__ = ["AgentCapability", "CAPABILITY_JSON", "CapabilityRun", "DEFAULT_JUDGE", "JUDGED_STAGES", "JUDGES", "Judge",
           "SESSION_CAPABILITY_JSON", "SessionCapability", "Strategy", "aggregate", "get_judge", "load_strategies",
           "session_document"]
