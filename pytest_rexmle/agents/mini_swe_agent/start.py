"""Start mini-swe-agent (``mini``, PyPI mini-swe-agent) headless under the ReX-MLE contract.

Mapping: ``mini --agent-class default`` (the non-interactive agent: no confirmation, no prompt for a
next task) ``--yolo --exit-immediately -t <prompt>``, the built-in ``mini.yaml`` plus
``agent.step_limit`` (the ``steps`` option), ``agent.cost_limit=0`` (the run's time limit and the
gateway bound it, not LiteLLM's price list) and ``environment.timeout`` (one bash action may run as long
as the budget allows: training is a single long command). The model goes through LiteLLM: a bare name
is taken as an OpenAI-compatible model at OPENAI_BASE_URL (``openai/<name>``); ``anthropic/...`` or
``gemini/...`` names use those providers' standard variables. The trajectory (``-o``) and the global
config folder go to ``$REXMLE_WORKSPACE/mini-swe-agent/``; first-run set-up (which asks questions) is
skipped with MSWEA_CONFIGURED.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from cli_agent import begin, conclude, run_cli
from rexmle_adapter import parse

FLAGS = {"model": "gpt-5-mini", "step_limit": 0}
NAME = "mini-swe-agent"


def litellm_model(name: str) -> str:
    return name if "/" in name else f"openai/{name}"


def command(args: argparse.Namespace, text: str, trajectory: Path, action_timeout: int) -> list[str]:
    return [shutil.which("mini") or "mini", "--agent-class", "default", "--yolo", "--exit-immediately",
            "-m", litellm_model(args.model), "-t", text, "-o", str(trajectory),
            "-c", "mini.yaml", "-c", f"agent.step_limit={args.step_limit}", "-c", "agent.cost_limit=0",
            "-c", f"environment.timeout={action_timeout}"]


def reported_usage(trajectory: Path) -> dict:
    """mini-swe-agent's own account: calls and LiteLLM-priced cost from its trajectory, tokens from the
    responses it saved."""
    try:
        data = json.loads(trajectory.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    info = data.get("info") or {}
    stats = info.get("model_stats") or {}
    tokens = {"input_tokens": 0, "output_tokens": 0}
    for message in data.get("messages") or []:
        usage = ((message.get("extra") or {}).get("response") or {}).get("usage") or {}
        tokens["input_tokens"] += int(usage.get("prompt_tokens") or 0)
        tokens["output_tokens"] += int(usage.get("completion_tokens") or 0)
    return {"source": "mini-swe-agent trajectory", "calls": stats.get("api_calls"),
            "cost_usd": stats.get("instance_cost"), "exit_status": info.get("exit_status"), **tokens}


def main(argv: list[str]) -> int:
    args = parse(argv, FLAGS)
    contract, folder, text = begin(NAME)
    trajectory = folder / "trajectory.json"
    env = {"MSWEA_CONFIGURED": "true", "MSWEA_SILENT_STARTUP": "1", "MSWEA_COST_TRACKING": "ignore_errors",
           "MSWEA_GLOBAL_CONFIG_DIR": str(folder / "config"), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "PAGER": "cat"}
    action_timeout = max(60, int(contract.agent_budget()))
    code = run_cli(command(args, text, trajectory, action_timeout), contract, folder, env)
    return conclude(NAME, contract, code, folder, reported_usage(trajectory))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
