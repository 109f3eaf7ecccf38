"""mini-swe-agent (LiteLLM models) in its image (``Dockerfile`` and ``start.py`` beside this module)."""

from __future__ import annotations

from ...errors import RexmleError
from ..coding_cli import CodingCLIAgent
from ..container import protocol_of_model

#: the model its start script uses when none is given (start.py's FLAGS)
START_DEFAULT_MODEL = "gpt-5-mini"


class MiniSweAgent(CodingCLIAgent):
    image = "rexmle/mini-swe-agent:latest"
    log_folders = ("mini-swe-agent",)
    steps_flag = "--step-limit"

    def __init__(self, name: str, options: dict[str, str]) -> None:
        super().__init__(name, options)
        model = options.get("model", "")
        if model.startswith("/") or model.endswith("/"):
            raise RexmleError(f"agent {name!r}: model {model!r} is not a LiteLLM model name (provider/model)")


    def model_protocols(self) -> tuple[str, ...]:
        """LiteLLM's routing of its model name: a bare name goes to the OpenAI-compatible endpoint."""
        return (protocol_of_model(self.model or START_DEFAULT_MODEL),)


ADAPTER = MiniSweAgent
