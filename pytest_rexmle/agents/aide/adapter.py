"""The ``aide`` agent: AIDE (WecoAI's aideml, ``aide`` CLI) in its own image, ``rexmle/aide:latest``.

``--agent=aide --rexmle-runtime=docker [--agent-option model=o4-mini] [--agent-option steps=20]``.
The image's start script (``agents/aide/start.py``) maps the contract onto aideml's config keys, enforces
the time limit and copies the best submission into the submission folder; see that file for the
mapping. API keys are taken from the host's environment (never from options, so they never reach
result files) and passed into the container as secret environment.
"""

from __future__ import annotations

from ..base import AgentContext
from ..container import START, ContainerAgent


class AideAgent(ContainerAgent):
    image = "rexmle/aide:latest"
    known_options = ("model", "feedback_model", "steps", "exec_timeout", "k_fold", "image")
    log_folders = ("aide/logs",)
    default_model = "o4-mini"  # aideml 0.2.2's own default coding model

    def command(self, ctx: AgentContext) -> list[str]:
        argv = ["python3", START, "--model", self.model,
                "--feedback-model", self.options.get("feedback_model") or self.model,
                "--steps", self.options.get("steps", "20"), "--k-fold", self.options.get("k_fold", "5")]
        if self.options.get("exec_timeout"):
            argv += ["--exec-timeout", self.options["exec_timeout"]]
        return argv


ADAPTER = AideAgent
