"""What the coding-CLI agents share: Claude Code, Codex CLI, Gemini CLI and mini-swe-agent (one folder each
beside this module: adapter, image recipe, start script).

``--agent=claude-code --rexmle-runtime=docker [--agent-option model=claude-sonnet-4-5] [--agent-option steps=200]``
(likewise ``codex``, ``gemini-cli``, ``mini-swe-agent``). Each image's start script
(``agents/<agent>/start.py`` with ``agents/common/cli_agent.py``) runs the real CLI headless with the
task's instructions as its prompt; this side only chooses the image, turns the options into the start
script's flags, passes the provider's standard variables through (never logged), and keeps the CLI's
own settings, sessions, transcript and self-reported usage in ``<run>/logs/<agent>/``.

The CLIs talk to their provider through the standard variables only — ``ANTHROPIC_BASE_URL`` /
``ANTHROPIC_API_KEY`` (Claude Code), ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` (Codex, mini-swe-agent),
``GOOGLE_GEMINI_BASE_URL`` / ``GEMINI_API_KEY`` (Gemini CLI) — which the gateway sets in a gated run.
"""

from __future__ import annotations

import json
import os
from typing import ClassVar

from .container import PASS_THROUGH, START, ContainerAgent
from .base import AgentContext

#: the standard variables a CLI agent reads besides the keys ContainerAgent passes through
CLI_PASS_THROUGH = PASS_THROUGH + ("ANTHROPIC_BASE_URL", "GOOGLE_GEMINI_BASE_URL", "REXMLE_VALIDATE_URL")


class CodingCLIAgent(ContainerAgent):
    """A coding CLI from a public registry, run headless in ``rexmle/<name>:latest``."""

    supported_isolation = ("docker",)  # the CLI and its Node runtime live in the image
    known_options = ("model", "steps", "image")
    #: the start script's flag that takes ``steps`` (the CLI's own turn or step limit)
    steps_flag: ClassVar[str] = "--max-turns"
    #: the protocol the CLI speaks, for the README and usage checks
    protocol: ClassVar[str] = ""

    def passed_through(self) -> dict[str, str]:
        return {k: os.environ[k] for k in CLI_PASS_THROUGH if os.environ.get(k)}

    def command(self, ctx: AgentContext) -> list[str]:
        argv = ["python3", START]
        if self.model:
            argv += ["--model", self.model]
        if self.options.get("steps"):
            argv += [self.steps_flag, self.options["steps"]]
        return argv

    def reported_usage(self, ctx: AgentContext) -> dict | None:
        """What the CLI itself reported (its start script's ``reported_usage.json``), if anything."""
        path = ctx.logs / self.name / self.log_folders[0] / "reported_usage.json"
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
