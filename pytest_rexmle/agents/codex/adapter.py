"""Codex CLI (OpenAI) headless in its image (``image.toml`` and ``start.py`` beside this module)."""

from __future__ import annotations

from ..coding_cli import CodingCLIAgent


class CodexAgent(CodingCLIAgent):
    image = "rexmle/codex:latest"
    protocol = "openai"
    log_folders = ("codex",)
    known_options = ("model", "image")  # codex exec has no turn limit: the time budget bounds it


ADAPTER = CodexAgent
