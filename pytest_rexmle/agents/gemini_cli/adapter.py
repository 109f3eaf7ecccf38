"""Gemini CLI (Google) headless in its image (``image.toml`` and ``start.py`` beside this module)."""

from __future__ import annotations

from ..coding_cli import CodingCLIAgent


class GeminiCLIAgent(CodingCLIAgent):
    image = "rexmle/gemini-cli:latest"
    protocol = "gemini"
    log_folders = ("gemini-cli",)


ADAPTER = GeminiCLIAgent
