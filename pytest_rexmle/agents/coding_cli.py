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

from typing import ClassVar

from .base import AgentContext
from .container import PASS_THROUGH, START, ContainerAgent


class CodingCLIAgent(ContainerAgent):
    """A coding CLI from a public registry, run headless in ``rexmle/<name>:latest``."""

    known_options: ClassVar[tuple[str, ...]] = ("model", "steps", "image")
    #: the standard variables a CLI reads besides the keys every container agent gets
    pass_through = PASS_THROUGH + ("ANTHROPIC_BASE_URL", "GOOGLE_GEMINI_BASE_URL", "REXMLE_VALIDATE_URL")
    #: the start script's flag that takes ``steps`` (the CLI's own turn or step limit)
    steps_flag: ClassVar[str] = "--max-turns"

    #: the API the CLI speaks whatever its model (None: by the model's name, as LiteLLM routes it)
    protocol: ClassVar[str | None] = None

    def model_protocols(self) -> tuple[str, ...]:
        return (self.protocol,) if self.protocol else super().model_protocols()

    def command(self, ctx: AgentContext) -> list[str]:
        argv = ["python3", START]
        if self.model:
            argv += ["--model", self.model]
        if self.options.get("steps"):
            argv += [self.steps_flag, self.options["steps"]]
        return argv
