"""Agents: what gets run against a task. Built-ins plus the ``rexmle.agents`` entry-point group.

The names are resolved on first use (PEP 562), so importing one agent does not import them all.
"""

from __future__ import annotations

BUILTIN_AGENTS = {
    "sample": "pytest_rexmle.agents.sample:SampleAgent",
    "command": "pytest_rexmle.agents.command:CommandAgent",
    "aide": "pytest_rexmle.agents.aide.adapter:AideAgent",
    "ml-master": "pytest_rexmle.agents.ml_master.adapter:MLMasterAgent",
    "rd-agent": "pytest_rexmle.agents.rd_agent.adapter:RDAgent",
    "claude-code": "pytest_rexmle.agents.claude_code.adapter:ClaudeCodeAgent",
    "codex": "pytest_rexmle.agents.codex.adapter:CodexAgent",
    "gemini-cli": "pytest_rexmle.agents.gemini_cli.adapter:GeminiCLIAgent",
    "mini-swe-agent": "pytest_rexmle.agents.mini_swe_agent.adapter:MiniSweAgent",
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
