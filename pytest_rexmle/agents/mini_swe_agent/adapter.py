"""mini-swe-agent (LiteLLM models) in its image (``Dockerfile`` and ``start.py`` beside this module)."""

from __future__ import annotations

from ...errors import RexmleError
from ..coding_cli import CodingCLIAgent


class MiniSweAgent(CodingCLIAgent):
    image = "rexmle/mini-swe-agent:latest"
    log_folders = ("mini-swe-agent",)
    steps_flag = "--step-limit"

    def __init__(self, name: str, options: dict[str, str]) -> None:
        super().__init__(name, options)
        model = options.get("model", "")
        if model.startswith("/") or model.endswith("/"):
            raise RexmleError(f"agent {name!r}: model {model!r} is not a LiteLLM model name (provider/model)")


ADAPTER = MiniSweAgent
