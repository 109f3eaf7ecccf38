"""The ``command`` agent: any program of the user's, started under the contract.

``--agent=command --agent-option cmd="python my_agent.py" --agent-option dir=path/to/agent`` copies the
folder into the run workspace (so the agent can modify its own copy and nothing of the original is
exposed) and runs the command there with ``/bin/sh -c``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ..errors import RexmleError
from .base import Agent, AgentContext


class CommandAgent(Agent):
    known_options = ("cmd", "dir")
    required_options = ("cmd",)

    def setup(self, ctx: AgentContext) -> Path | None:
        source = self.options.get("dir")
        if not source:
            return None
        src = Path(source).expanduser().resolve()
        if not src.is_dir():
            raise RexmleError(f"agent option dir={source!r} is not a folder")
        dest = ctx.workspace / "agent"
        shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
        return dest

    def command(self, ctx: AgentContext) -> list[str]:
        return ["/bin/sh", "-c", self.options["cmd"]]
