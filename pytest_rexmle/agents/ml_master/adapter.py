"""The ``ml-master`` agent: ML-Master (SJTU SAI, MCTS over AIDE-style solution trees) in ``rexmle/ml-master``.

``--agent=ml-master --rexmle-runtime=docker [--agent-option model=deepseek-r1]
[--agent-option feedback_model=gpt-4o-2024-08-06] [--agent-option steps=500] [--agent-option parallel=3]``.
The image's start script (``agents/ml_master/start.py``) runs ``python main_mcts.py key=value ...`` with
the contract mapped onto ML-Master's config (upstream commit pinned in agents/ml_master/Dockerfile),
interrupts it before the hard limit, and exports ``<workspace>/rexmle/best_submission/submission.csv``
(plus its prediction files) into the submission folder. The coding model is called through streamed
chat completions (a ``gpt-5*`` one through the Responses API); the feedback model must be ``gpt-*`` or a
Qwen/DeepSeek model (ML-Master's own provider rule). Keys come from the host environment as secret
environment (OPENAI_API_KEY, OPENAI_BASE_URL, DEEPSEEK_API_KEY, ...).
"""

from __future__ import annotations

from ...errors import RexmleError
from ..base import AgentContext
from ..container import START, ContainerAgent

DEFAULT_FEEDBACK_MODEL = "gpt-4o-2024-08-06"  # as in ML-Master's run.sh


def feedback_model_ok(model: str) -> bool:
    """ML-Master's ``backend.determine_provider``: ``gpt-*`` goes to OpenAI, a model naming qwen/Qwen or
    deepseek to its Qwen backend; anything else raises at its first review (agents/ml_master/start.py
    applies the same rule inside the image)."""
    return model.startswith("gpt-") or "qwen" in model or "Qwen" in model or "deepseek" in model


class MLMasterAgent(ContainerAgent):
    image = "rexmle/ml-master:latest"
    known_options = ("model", "feedback_model", "steps", "parallel", "exec_timeout", "image")
    log_folders = ("ml-master/logs",)
    default_model = "deepseek-r1"  # ML-Master's own coding model; feedback defaults to gpt-4o as in its run.sh

    def __init__(self, name: str, options: dict[str, str]) -> None:
        super().__init__(name, options)
        feedback = options.get("feedback_model") or DEFAULT_FEEDBACK_MODEL
        if not feedback_model_ok(feedback):
            raise RexmleError(f"agent {name!r}: ML-Master's feedback model must be an OpenAI gpt-* model or a "
                              f"Qwen/DeepSeek one, not {feedback!r} (its backend.determine_provider refuses "
                              f"anything else); keep the default {DEFAULT_FEEDBACK_MODEL!r} or name such a model")

    def command(self, ctx: AgentContext) -> list[str]:
        argv = ["python3", START, "--model", self.model,
                "--feedback-model", self.options.get("feedback_model") or DEFAULT_FEEDBACK_MODEL,
                "--steps", self.options.get("steps", "500"), "--parallel", self.options.get("parallel", "3")]
        if self.options.get("exec_timeout"):
            argv += ["--exec-timeout", self.options["exec_timeout"]]
        return argv


ADAPTER = MLMasterAgent
