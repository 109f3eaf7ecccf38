"""Agents: what gets run against a task. Built-ins plus the ``rexmle.agents`` entry-point group."""

from ..registry import Registry
from .base import Agent, AgentContext

AGENTS = Registry("rexmle.agents", {
    "sample": "pytest_rexmle.agents.sample:SampleAgent",
    "command": "pytest_rexmle.agents.command:CommandAgent",
    "aide": "pytest_rexmle.agents.aide:AideAgent",
    "ml-master": "pytest_rexmle.agents.ml_master:MLMasterAgent",
    "rd-agent": "pytest_rexmle.agents.rd_agent:RDAgent",
})


def get_agent(name: str, options: dict[str, str] | None = None) -> Agent:
    return AGENTS.load(name)(name=name, options=dict(options or {}))


__all__ = ["AGENTS", "Agent", "AgentContext", "get_agent"]
