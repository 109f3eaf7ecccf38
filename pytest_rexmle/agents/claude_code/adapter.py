"""Claude Code (Anthropic) headless in its image (``image.toml`` and ``start.py`` beside this module)."""

from __future__ import annotations

from ..coding_cli import CodingCLIAgent


class ClaudeCodeAgent(CodingCLIAgent):
    image = "rexmle/claude-code:latest"
    protocol = "anthropic"
    log_folders = ("claude-code",)  # the start script's $REXMLE_WORKSPACE/<folder>


ADAPTER = ClaudeCodeAgent
