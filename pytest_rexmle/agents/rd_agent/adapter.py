"""The ``rd-agent`` agent: Microsoft's R&D-Agent (rdagent 1.0.0) data-science loop in ``rexmle/rd-agent``.

``--agent=rd-agent --rexmle-runtime=docker [--agent-option model=gpt-4o] [--agent-option steps=N]
[--agent-option embedding_model=text-embedding-3-small]`` (``steps`` is R&D-Agent's ``--loop-n``; without
it the loop runs until its ``--timeout``, the run's budget). Model names are LiteLLM's; for a model an
OpenAI-compatible server at ``$OPENAI_BASE_URL`` names itself, write ``openai/<name>``. The image's start
script (``agents/rd_agent/start.py``) presents the task as a custom competition (``DS_SCEN=...DataScienceScen``,
``DS_LOCAL_DATA_PATH``), runs ``rdagent data_science --competition <task>`` with its code executed locally
in the container (no Docker inside), and exports the submission of the experiment R&D-Agent chose to
submit. Keys come from the host environment as secret environment and are masked in its output and files.
"""

from __future__ import annotations

from ..base import AgentContext
from ..container import START, ContainerAgent


class RDAgent(ContainerAgent):
    image = "rexmle/rd-agent:latest"
    known_options = ("model", "embedding_model", "steps", "image")
    log_folders = ()  # its log (pickled experiments, large) stays in workspace/rd-agent/log
    default_model = "gpt-4o"

    def command(self, ctx: AgentContext) -> list[str]:
        argv = ["python3", START, "--model", self.model,
                "--embedding-model", self.options.get("embedding_model") or "text-embedding-3-small"]
        if self.options.get("steps"):
            argv += ["--loop-n", self.options["steps"]]
        return argv


ADAPTER = RDAgent
