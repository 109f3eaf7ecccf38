"""What the image-based agents share (``aide``, ``ml-master``, ``rd-agent`` and the coding CLIs): option
handling, key pass-through into the container, and the host-side ``finish`` that keeps the agent's own
logs without any key in them. Each agent's folder (``agents/<agent>/``) holds its adapter, its image
recipe and the start script at ``/opt/rexmle-agent/start.py``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import ClassVar

from ..errors import RexmleError
from .base import Agent, AgentContext
from .common.rexmle_adapter import SECRET_VARIABLES, scrub_secrets

#: provider keys (those the images scrub) and endpoints passed through from the host; values never logged
PASS_THROUGH = SECRET_VARIABLES + ("OPENAI_BASE_URL", "AZURE_OPENAI_ENDPOINT", "OPENAI_API_VERSION")
START = "/opt/rexmle-agent/start.py"


def protocol_of_model(model: str) -> str:
    """The API a model name goes to, as the bundled agents' backends route it: ``claude*`` (or LiteLLM's
    ``anthropic/...``) to Anthropic, ``gemini*`` (``gemini/...``) to Gemini, anything else (gpt, o-series,
    DeepSeek, Qwen, a local server's name) to the OpenAI-compatible endpoint."""
    name = model.lower()
    if name.startswith("openai/"):
        return "openai"
    if name.startswith("anthropic/") or "claude" in name:
        return "anthropic"
    if name.startswith(("gemini", "vertex_ai/")):
        return "gemini"
    return "openai"


class ContainerAgent(Agent):
    """An agent that ships as a Docker image with a start script at ``/opt/rexmle-agent/start.py``."""

    #: everything it runs lives in its image: a Docker engine runs it, or the local runtime enters the image
    #: unpacked by ``rexmle images import`` (bubblewrap only; ``LocalRuntime.check_image`` says why not)
    supported_isolation = ("docker", "local")
    #: the host's variables passed into the container (keys, endpoints); values never logged
    pass_through: ClassVar[tuple[str, ...]] = PASS_THROUGH
    #: where, relative to the workspace, the agent keeps logs worth copying into <run>/logs/<agent>/
    log_folders: ClassVar[tuple[str, ...]] = ()
    default_model: ClassVar[str] = ""

    def __init__(self, name: str, options: dict[str, str]) -> None:
        super().__init__(name, options)
        self.image = options.get("image") or type(self).image
        steps = options.get("steps")
        if steps is not None and (not steps.isdigit() or int(steps) < 1):
            raise RexmleError(f"agent {name!r}: steps must be a positive integer, got {steps!r}")

    @property
    def model(self) -> str:
        return self.options.get("model") or self.default_model

    def model_protocols(self) -> tuple[str, ...]:
        """The APIs of its models (the coding model and, where it has one, the feedback model's)."""
        models = (self.model, self.options.get("feedback_model") or "")
        return tuple(dict.fromkeys(protocol_of_model(m) for m in models if m))

    def passed_through(self) -> dict[str, str]:
        return {k: os.environ[k] for k in self.pass_through if os.environ.get(k)}

    def environment(self, ctx: AgentContext) -> dict[str, str]:
        return self.passed_through()

    def secret_environment(self) -> tuple[str, ...]:
        return tuple(self.passed_through())

    def finish(self, ctx: AgentContext) -> None:
        """Keep the agent's own logs next to ours, without any key in them."""
        secrets = [v for v in self.passed_through().values() if len(v) >= 8]
        for rel in self.log_folders:
            src = ctx.workspace / rel
            if not src.is_dir():
                continue
            dest = ctx.logs / self.name
            shutil.copytree(src, dest / Path(rel).name, dirs_exist_ok=True, symlinks=True,
                            ignore=shutil.ignore_patterns("*.pt", "*.pth", "*.ckpt", "*.npy", "*.nii*"))
            scrub_secrets(dest, secrets)  # the images' scrubber (common/), pickles kept loadable
