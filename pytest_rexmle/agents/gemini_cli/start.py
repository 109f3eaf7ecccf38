"""Start Gemini CLI (``gemini``, npm @google/gemini-cli) headless under the ReX-MLE contract.

Mapping: ``gemini -p <prompt>`` (headless: one task, no TUI) with ``--output-format stream-json`` (JSON
events; the final ``result`` event carries Gemini CLI's own token counts), ``--approval-mode yolo``
(every tool runs without asking: the container is the sandbox), ``--skip-trust`` (the workspace is a
folder it has never seen) and ``-m`` from the ``model`` option. The endpoint and key are the standard
GOOGLE_GEMINI_BASE_URL / GEMINI_API_KEY. GEMINI_CLI_HOME is ``$REXMLE_WORKSPACE/gemini-cli/home``:
its ``.gemini/settings.json`` (written here: API-key auth, no update checks, no usage statistics or
telemetry, ``model.maxSessionTurns`` from the ``steps`` option) and its chat sessions are kept as logs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys

from cli_agent import begin, conclude, json_lines, result_event_report, run_cli
from rexmle_adapter import parse

FLAGS = {"model": "", "max_turns": 0}
NAME = "gemini-cli"
#: what the ``stats`` of Gemini CLI's result event count, kept under their own names
STATS = ("input_tokens", "output_tokens", "total_tokens", "tool_calls", "duration_ms")


def settings(args: argparse.Namespace) -> dict:
    values: dict = {"security": {"auth": {"selectedType": "gemini-api-key"}},
                    "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
                    "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False}}
    if args.max_turns:
        values["model"] = {"maxSessionTurns": args.max_turns}
    return values


def command(args: argparse.Namespace, text: str) -> list[str]:
    argv = [shutil.which("gemini") or "gemini", "-p", text, "--output-format", "stream-json",
            "--approval-mode", "yolo", "--skip-trust"]
    if args.model:
        argv += ["-m", args.model]
    return argv


def reported_usage(events: list[dict]) -> dict:
    """Gemini CLI's own account: the ``stats`` of its final ``result`` event."""
    report, result = result_event_report(events, "gemini-cli result event", "stats", STATS)
    if result:
        report["status"] = result.get("status")
    return report


def main(argv: list[str]) -> int:
    args = parse(argv, FLAGS)
    contract, folder, text = begin(NAME)
    home = folder / "home"
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings(args), indent=2), encoding="utf-8")
    env = {"GEMINI_CLI_HOME": str(home), "GEMINI_CLI_NO_RELAUNCH": "true", "NO_BROWSER": "true"}
    code = run_cli(command(args, text), contract, folder, env)
    usage = reported_usage(json_lines(folder / "stdout.jsonl"))
    return conclude(NAME, contract, code, folder, usage)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
