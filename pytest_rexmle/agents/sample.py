"""The ``sample`` agent: submits the task's trivial baseline, the floor every report should show.

It runs inside the runtime like any other agent (so it exercises the contract) and uses only the
public data it is given. What runs inside the sandbox is :mod:`.sample_main`.
"""

from __future__ import annotations

import sys

from .base import Agent, AgentContext


class SampleAgent(Agent):
    def command(self, ctx: AgentContext) -> list[str]:
        return [sys.executable, "-m", "pytest_rexmle.agents.sample_main"]
