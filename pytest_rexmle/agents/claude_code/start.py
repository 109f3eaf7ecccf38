"""Start Claude Code (``claude``, npm @anthropic-ai/claude-code) headless under the ReX-MLE contract.

Mapping: ``claude -p <prompt>`` (print mode: one task, no TUI) with ``--output-format stream-json
--verbose`` (one JSON event per line; the final ``result`` event carries Claude Code's own usage and
cost), ``--dangerously-skip-permissions`` (no approval prompts: the container is the sandbox; Claude
Code refuses this as root, and the Docker runtime runs agents as a non-root uid), ``--model`` and
``--max-turns`` from the agent options. The endpoint and key are the standard ANTHROPIC_BASE_URL /
ANTHROPIC_API_KEY (the gateway's, in a gated run). Settings and sessions go to
``$REXMLE_WORKSPACE/claude-code/config`` (CLAUDE_CONFIG_DIR); auto-update, telemetry and other
non-essential traffic are switched off.
"""

from __future__ import annotations

import argparse
import shutil
import sys

from cli_agent import begin, conclude, json_lines, result_event_report, run_cli
from rexmle_adapter import parse

FLAGS = {"model": "", "max_turns": 0}
NAME = "claude-code"
QUIET = {"DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
         "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "CI": "1"}
#: the token counts of the ``usage`` of Claude Code's result event, kept under their own names
TOKEN_COUNTS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def command(args: argparse.Namespace, text: str) -> list[str]:
    argv = [shutil.which("claude") or "claude", "-p", text, "--output-format", "stream-json", "--verbose",
            "--dangerously-skip-permissions"]
    if args.model:
        argv += ["--model", args.model]
    if args.max_turns:
        argv += ["--max-turns", str(args.max_turns)]
    return argv


def reported_usage(events: list[dict]) -> dict:
    """Claude Code's own account of the run: its final ``result`` event (tokens, cost in USD, turns)."""
    report, result = result_event_report(events, "claude-code result event", "usage", TOKEN_COUNTS)
    if result:
        report.update(cost_usd=result.get("total_cost_usd"), turns=result.get("num_turns"),
                      subtype=result.get("subtype"), models=sorted((result.get("modelUsage") or {}).keys()))
    return report


def main(argv: list[str]) -> int:
    args = parse(argv, FLAGS)
    contract, folder, text = begin(NAME)
    env = {**QUIET, "CLAUDE_CONFIG_DIR": str(folder / "config")}
    code = run_cli(command(args, text), contract, folder, env)
    usage = reported_usage(json_lines(folder / "stdout.jsonl"))
    return conclude(NAME, contract, code, folder, usage)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
