"""Agents: what gets run against a task. Built-ins plus the ``rexmle.agents`` entry-point group.

The names are resolved on first use (PEP 562), so importing one agent does not import them all.
"""

from __future__ import annotations

BUILTIN_AGENTS = {
    "sample": "pytest_rexmle.agents.sample:SampleAgent",
    "command": "pytest_rexmle.agents.command:CommandAgent",
    "aide": "pytest_rexmle.agents.aide:AideAgent",
    "ml-master": "pytest_rexmle.agents.ml_master:MLMasterAgent",
    "rd-agent": "pytest_rexmle.agents.rd_agent:RDAgent",
    "claude-code": "pytest_rexmle.agents.coding_cli:ClaudeCodeAgent",
    "codex": "pytest_rexmle.agents.coding_cli:CodexAgent",
    "gemini-cli": "pytest_rexmle.agents.coding_cli:GeminiCLIAgent",
    "mini-swe-agent": "pytest_rexmle.agents.coding_cli:MiniSweAgent",
}


def __getattr__(name: str):
    if name == "AGENTS":
        from ..providers import Registry

        globals()["AGENTS"] = registry = Registry("rexmle.agents", BUILTIN_AGENTS)
        return registry
    if name in ("Agent", "AgentContext"):
        from . import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_agent(name: str, options: dict[str, str] | None = None) -> "Agent":
    return __getattr__("AGENTS").load(name)(name=name, options=dict(options or {}))


__all__ = ["AGENTS", "Agent", "AgentContext", "get_agent"]
