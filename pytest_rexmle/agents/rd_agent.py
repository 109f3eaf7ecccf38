"""The ``rd-agent`` agent: Microsoft's R&D-Agent data-science loop in ``rexmle/rd-agent``.

``--agent=rd-agent --rexmle-runtime=docker [--agent-option model=gpt-4o] [--agent-option steps=N]``
(``steps`` is R&D-Agent's ``--loop_n``; without it the loop runs until the time limit). The image's
start script (``images/rd-agent/start.py``) presents the task as a custom competition
(``DS_SCEN=...DataScienceScen``, ``DS_LOCAL_DATA_PATH``), runs ``rdagent data_science --competition <task>``,
and exports the SOTA experiment's submission. Keys come from the host environment as secret environment.
"""

from __future__ import annotations

from .aide import START, ContainerAgent
from .base import AgentContext


class RDAgent(ContainerAgent):
    image = "rexmle/rd-agent:latest"
    supported_isolation = ("docker",)  # everything it runs lives in its image
    known_options = ("model", "embedding_model", "steps", "image")
    log_folders = ()  # its log (pickled experiments, large) stays in workspace/rd-agent/log
    default_model = "gpt-4o"

    def command(self, ctx: AgentContext) -> list[str]:
        argv = ["python3", START, "--model", self.model,
                "--embedding-model", self.options.get("embedding_model") or "text-embedding-3-small"]
        if self.options.get("steps"):
            argv += ["--loop-n", self.options["steps"]]
        return argv
